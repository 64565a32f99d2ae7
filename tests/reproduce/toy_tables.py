"""A tiny synthetic dataset, a toy LLM and a runner for the ``python -m reproduce`` table commands
(fake LLM and fake embedder; seconds). Shared by the ``test_tables_*`` files."""
import json
import re

from fakes import NgramEncoder, ScriptedLLM
from helpers import CORPUS, toy_respond

from hippo_engine.llm.base import LLMResponse
from reproduce.cli import main

# (question, gold passage indices into helpers.CORPUS, answer)
QUESTIONS = [("Where was Ilse Marrow born?", [1], "Velor"),
             ("Who founded Tamsin College?", [3], "Oren Pike"),
             ("In which country is the town where Ilse Marrow was born?", [1, 2], "Kaldavia"),
             ("Who founded the fair held in Velor?", [6], "Mira Olt"),
             ("Whom did the founder of the Amber Fair marry?", [6, 7], "Oren Pike"),
             ("Which river does the capital of Kaldavia lie on?", [5], "Tamsin River")]


def make_dataset(folder, name="toyset", gold=True, questions=QUESTIONS):
    folder.mkdir(parents=True, exist_ok=True)
    corpus = [{"title": d.split("\n", 1)[0], "text": d.split("\n", 1)[1]} for d in CORPUS]
    qs = []
    for i, (q, g, a) in enumerate(questions):
        item = {"id": f"q{i}", "question": q, "answer": a, "answer_aliases": []}
        if gold:
            item["paragraphs"] = [{"title": c["title"], "paragraph_text": c["text"], "is_supporting": j in g}
                                  for j, c in enumerate(corpus)]
        qs.append(item)
    (folder / f"{name}.json").write_text(json.dumps(qs))
    (folder / f"{name}_corpus.json").write_text(json.dumps(corpus))
    return folder


def respond(messages):
    """OpenIE and query NER (toy), the DSPy filter (keeps the first two candidates), the reader
    (answers with the title of the first passage it sees)."""
    user = messages[-1]["content"]
    if "[[ ## candidate_facts ## ]]" in user:
        body = user.split("[[ ## candidate_facts ## ]]", 1)[1].split("[[ ##", 1)[0]
        facts = json.loads(body.strip().split("\n\n", 1)[0])
        return f"[[ ## relevant_facts ## ]]\n{json.dumps(facts[:2])}\n\n[[ ## completed ## ]]"
    if "Question:" in user and "Thought:" in user:
        m = re.search(r"Wikipedia Title: ([^\n]+)", user)
        return f"The passages say so. Answer: {m.group(1) if m else 'unknown'}"
    return toy_respond(messages)


class CountingLLM(ScriptedLLM):
    """ScriptedLLM that reports the second identical prompt as cached, like the engine's cache."""

    def __init__(self):
        super().__init__(respond, name="toy-llm")
        self.seen = set()

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        key = json.dumps(messages, sort_keys=True)
        with self._lock:
            cached = key in self.seen
            self.seen.add(key)
        r = super().generate(messages)
        return LLMResponse(r.text, prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens,
                           cached=cached)


def run(env, command, *extra, llm=None, encoder=None, dataset=None):
    argv = [command, "--dataset", str(dataset or env["data"]), "--save-dir", str(env["save"]),
            "--out", str(env["out"]), "--quiet", *extra]
    return main(argv, llm=llm or CountingLLM(), encoder=encoder or NgramEncoder())
