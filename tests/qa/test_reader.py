"""The reader: prompt format, answer parsing and batch answering (fake LLM)."""
import json
import threading

import numpy as np
import pytest

from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse
from hippo_engine.prompts import load_json_prompt, load_prompt
from hippo_engine.qa.reader import (
    QuerySolution,
    ReaderTemplate,
    answer_questions,
    build_reader_messages,
    default_reader_template,
    parse_answer,
)

DOCS = ["Alpha Hall\nAlpha Hall was built by Bo.", "Bo\nBo was born in Cetra.", "Cetra\nCetra is a town.",
        "Dunmore\nUnrelated."]


class FakeLLM(LLMClient):
    """Replies with ``reply(question_text)``; ``"FAIL"`` in the question raises LLMError."""

    model_name = "fake-reader"

    def __init__(self, reply=lambda q: "Some thought.\nAnswer: Cetra", cached=False):
        self.reply, self.cached = reply, cached
        self.seen = []
        self._lock = threading.Lock()

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        with self._lock:
            self.seen.append(list(messages))
        user = messages[-1]["content"]
        if "FAIL" in user:
            raise LLMError("server down")
        return LLMResponse(self.reply(user), prompt_tokens=100, completion_tokens=7, cached=self.cached)


def test_default_messages_structure():
    """The default reader cites: numbered passages, the citation instruction after the system text."""
    msgs = build_reader_messages("Where was the builder of Alpha Hall born?", DOCS[:2])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[0]["content"] == load_prompt("qa_system.txt").strip() + "\n\n" + load_prompt("qa_cite.txt").strip()
    example = load_json_prompt("qa_example.json")["examples"][0]
    assert msgs[2]["content"] == example["response"] and "[2]" in example["response"]
    assert msgs[1]["content"].startswith("[1] Wikipedia Title: " + example["passages"][0])
    assert msgs[1]["content"].endswith("Question: " + example["question"] + "\nThought: ")
    user = msgs[-1]["content"]
    assert user == ("[1] Wikipedia Title: Alpha Hall\nAlpha Hall was built by Bo.\n\n"
                    "[2] Wikipedia Title: Bo\nBo was born in Cetra.\n\n"
                    "Question: Where was the builder of Alpha Hall born?\nThought: ")


def test_messages_without_citations():
    """The same reader without citations: plain passages, no instruction, no markers in the example."""
    msgs = build_reader_messages("Where was the builder of Alpha Hall born?", DOCS[:2],
                                 default_reader_template().without_citations())
    assert msgs[0]["content"] == load_prompt("qa_system.txt").strip()
    assert "[" not in msgs[2]["content"] and msgs[2]["content"].endswith("Answer: Kessingford")
    assert msgs[1]["content"].startswith("Wikipedia Title: ")
    assert msgs[-1]["content"] == ("Wikipedia Title: Alpha Hall\nAlpha Hall was built by Bo.\n\n"
                                   "Wikipedia Title: Bo\nBo was born in Cetra.\n\n"
                                   "Question: Where was the builder of Alpha Hall born?\nThought: ")


def test_example_is_two_hop_and_answer_parses():
    from hippo_engine.qa.grounding import cut_answer

    ex = default_reader_template().examples
    assert len(ex) == 1 and len(ex[0].passages) >= 2
    assert cut_answer(parse_answer(ex[0].response)) == ("Kessingford", None)


def test_custom_template_dict():
    tpl = {"system": "SYS", "examples": [], "passage_prefix": "Doc: "}
    msgs = build_reader_messages("q?", ["T\nx"], template=tpl)
    assert msgs == [{"role": "system", "content": "SYS"},
                    {"role": "user", "content": "Doc: T\nx\n\nQuestion: q?\nThought: "}]
    with pytest.raises(ValueError):
        build_reader_messages("q?", [], template={"examples": []})
    assert isinstance(ReaderTemplate.from_dict(tpl), ReaderTemplate)


@pytest.mark.parametrize("text,expected", [
    ("Bo built it. Bo was born in Cetra.\nAnswer: Cetra", "Cetra"),
    ("Answer: wrong\nThinking again...\nAnswer: Cetra.", "Cetra"),  # the last mark wins, period dropped
    ("**Answer:** **Cetra**", "Cetra"),
    ("**Answer**: Cetra", "Cetra"),
    ("Final answer: `Cetra`", "Cetra"),
    ("answer : 1975\n\nExplanation: from passage 2.", "1975"),
    ("Answer:\n  Washington, D.C.", "Washington, D.C."),  # initials keep their period
    ("Answer: J. R. R. Tolkien", "J. R. R. Tolkien"),
    ("Cetra", "Cetra"),  # no mark: whole response stripped
    ("  The town of Cetra.  \n", "The town of Cetra."),
    ("<think>Answer: no</think>Reasoning.\nAnswer: yes", "yes"),
    ("", ""),
])
def test_parse_answer(text, expected):
    assert parse_answer(text) == expected


def test_answer_questions_respects_top_k_and_fills_answers():
    llm = FakeLLM()
    sols = [QuerySolution(question="q1?", docs=DOCS, doc_scores=np.array([4.0, 3.0, 2.0, 1.0])),
            QuerySolution(question="q2?", docs=DOCS[:1], doc_scores=[1.0])]
    responses, meta = answer_questions(llm, sols, qa_top_k=2)
    assert responses == ["Some thought.\nAnswer: Cetra"] * 2
    assert [s.answer for s in sols] == ["Cetra", "Cetra"]
    first_user = next(m for m in llm.seen if "q1?" in m[-1]["content"])[-1]["content"]
    assert "Wikipedia Title: Alpha Hall" in first_user and "Wikipedia Title: Bo" in first_user
    assert "Cetra\nCetra is a town" not in first_user and "Dunmore" not in first_user
    assert meta[0] == {"prompt_tokens": 100, "completion_tokens": 7, "cached": False,
                       "finish_reason": "stop", "error": None, "context_cut": 0, "llm_calls": 1}


def test_the_readers_replies_are_the_streamed_ones():
    from hippo_engine.llm.streaming import current_sink, streaming_to

    class Streaming(FakeLLM):     # as the local clients do: each piece to the sink of the call, if any
        def generate(self, messages, **kw):
            res = super().generate(messages, **kw)
            sink = current_sink()
            for piece in (res.text[:6], res.text[6:]) if sink else ():
                sink(piece)
            return res
    pieces: list[str] = []
    llm = Streaming()
    with streaming_to(pieces.append):
        answer_questions(llm, [QuerySolution(question="q1?", docs=DOCS, doc_scores=[4.0, 3.0, 2.0, 1.0])], 2)
        llm.generate([{"role": "user", "content": "an LLM call that is not the reader's"}])
    assert pieces == ["Some t", "hought.\nAnswer: Cetra"]


def test_answer_questions_error_does_not_crash():
    llm = FakeLLM(cached=True)
    sols = [QuerySolution("FAIL please", DOCS, [1, 1, 1, 1]), QuerySolution("fine?", DOCS, [1, 1, 1, 1])]
    responses, meta = answer_questions(llm, sols, qa_top_k=5)
    assert responses[0] == "" and sols[0].answer == ""
    assert "server down" in meta[0]["error"]
    assert sols[1].answer == "Cetra" and meta[1]["cached"] is True and meta[1]["error"] is None


def test_answer_questions_empty_and_bad_k():
    assert answer_questions(FakeLLM(), [], qa_top_k=5) == ([], [])
    with pytest.raises(ValueError):
        answer_questions(FakeLLM(), [QuerySolution("q", [], [])], qa_top_k=0)


def test_query_solution_to_dict_is_json():
    s = QuerySolution("q?", DOCS[:2], np.array([0.5, 0.25], dtype=np.float32), answer="Cetra",
                      gold_answers=["Cetra"], gold_docs=[DOCS[1]],
                      candidate_facts=[("a", "b", "c")], kept_facts=[("a", "b", "c")],
                      seed_entities=[("a", np.float32(0.5))], used_fallback=False,
                      passage_ids=["chunk-1", "chunk-2"], doc_ids=[["d1"], ("d2", "d3")])
    d = json.loads(json.dumps(s.to_dict()))
    assert d["passage_ids"] == ["chunk-1", "chunk-2"] and d["doc_ids"] == [["d1"], ["d2", "d3"]]
    assert d["doc_scores"] == [0.5, 0.25]
    assert d["candidate_facts"] == [["a", "b", "c"]]
    assert d["seed_entities"] == [["a", 0.5]]
    assert d["answer"] == "Cetra" and d["used_fallback"] is False
    fresh = QuerySolution("q", [], [])
    assert fresh.passage_ids == [] and fresh.doc_ids == [] and fresh.to_dict()["doc_ids"] == []
    assert fresh.candidate_facts == [] and fresh.candidate_facts is not QuerySolution("r", [], []).candidate_facts


def test_bundled_sample_corpus_is_well_formed():
    from pathlib import Path

    import hippo_engine

    data = json.loads((Path(hippo_engine.__file__).parent / "data" / "sample_corpus.json").read_text("utf-8"))
    titles = [p["title"] for p in data["corpus"]]
    assert len(titles) >= 12 and len(set(titles)) == len(titles)
    assert all(p["text"].strip() for p in data["corpus"])
    assert 4 <= len(data["questions"]) <= 6
    for q in data["questions"]:
        assert q["question"].endswith("?") and q["answers"]
        assert len(q["supporting_titles"]) == 2 and set(q["supporting_titles"]) <= set(titles)
        # the first answer is stated in a supporting passage
        support = " ".join(p["text"] for p in data["corpus"] if p["title"] in q["supporting_titles"])
        assert q["answers"][0] in support
