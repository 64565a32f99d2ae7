"""Answers kept to their passages: the worked example's answer is rejected where no passage has it,
an over-long answer is cut at a whole unit (or given up), and the reader records citations (fake LLMs;
a real HTTP server)."""
import json

import pytest

from hippo_engine.ids import chunk_id
from hippo_engine.llm.base import LLMClient, LLMResponse
from hippo_engine.qa.grounding import cut_answer, example_leak
from hippo_engine.qa.reader import QuerySolution, answer_questions, default_reader_template

DOCS = ["Fail2ban\nFail2ban scans log files and bans IP addresses that show malicious signs, "
        "such as too many failed SSH password attempts.",
        "OpenSSH\nOpenSSH is a suite of secure networking utilities based on the Secure Shell protocol."]
QUESTION = "Which tool bans IP addresses after failed SSH logins?"


class Reply(LLMClient):
    model_name = "fake-reader"

    def __init__(self, text):
        self.text = text

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        return LLMResponse(self.text, prompt_tokens=1, completion_tokens=1)


def read(text, docs=DOCS, **kw):
    sol = QuerySolution(QUESTION, list(docs), [1.0] * len(docs))
    answer_questions(Reply(text), [sol], 5, **kw)
    return sol


def test_example_answer_in_no_passage_is_rejected():
    sol = read("The passage says it. Answer: Kessingford")
    assert sol.answer == "" and "rejected" in sol.answer_notes[0] and "Kessingford" in sol.answer_notes[0]
    assert read("Answer: Kessingford [1]").answer == ""


def test_example_answer_found_in_a_passage_is_kept():
    docs = ["Kessingford\nKessingford is a town in Kent.", *DOCS]
    sol = read("Answer: Kessingford", docs)
    assert sol.answer == "Kessingford" and sol.answer_notes == []


def test_leak_check_for_contexts():
    sol = QuerySolution(QUESTION, [], [])
    answer_questions(Reply("Answer: Ottilie Brannagh"), [sol], 5, contexts=["-----Sources-----\nFail2ban bans IPs."])
    assert sol.answer == "" and sol.citations == []


def test_pasted_passage_is_cut_to_the_answer():
    sol = read("Wikipedia Title: " + DOCS[0])          # no Answer: line, the whole passage back
    assert sol.answer == "Fail2ban" and sol.answer_notes[0].startswith("cut:")
    long = "Answer: Fail2ban, which scans log files and bans IP addresses that show many failed SSH attempts"
    assert read(long).answer == "Fail2ban"
    assert read("Answer: Fail2ban [1]").answer == "Fail2ban"


def test_cut_answer_and_example_leak_units():
    assert cut_answer("Paris") == ("Paris", None)
    text, note = cut_answer(" ".join(["word"] * 40))
    assert text == "" and note is not None and note.startswith("rejected: an answer of 40 words")  # no fragment
    assert cut_answer("The Tidal Mill. It was designed in 1871 by an engineer who trained in the south")[0] == \
        "The Tidal Mill"
    examples = default_reader_template().example_texts()
    assert example_leak("kessingford", DOCS, examples)
    assert example_leak("1871", DOCS, examples)
    assert not example_leak("Fail2ban", DOCS, examples)            # not from the example
    assert not example_leak("Kessing", DOCS, examples)             # whole words only
    assert not example_leak("", DOCS, examples)


def test_citations_are_the_shown_passage_ids():
    sol = read("Passage [1] says so, see also [2] and [7].\nAnswer: Fail2ban [1]")
    assert sol.answer == "Fail2ban"
    assert sol.citations == [chunk_id(DOCS[0]), chunk_id(DOCS[1])] and sol.invalid_citations == 1
    d = sol.to_dict()
    assert d["citations"] == sol.citations and d["invalid_citations"] == 1 and json.dumps(d)
    sol = QuerySolution(QUESTION, list(DOCS), [1.0, 0.5], passage_ids=["p-a", "p-b"])
    answer_questions(Reply("Answer: Fail2ban [2]"), [sol], 1)          # only passage 1 was shown
    assert sol.citations == [] and sol.invalid_citations == 1


def test_plain_template_records_no_citations():
    sol = read("Answer: Fail2ban [1]", template=default_reader_template().without_citations())
    assert sol.answer == "Fail2ban" and sol.citations == [] and sol.invalid_citations == 0


@pytest.mark.slow
def test_rag_qa_cites_end_to_end_over_http(tmp_path):
    """rag_qa against a scripted OpenAI-compatible server on 127.0.0.1 that cites the passage whose
    title answers: citations are the ids of shown passages, the answer is grounded."""
    from helpers import CORPUS, make_rag
    from openai_server import FakeOpenAIServer

    from hippo_engine.config import QueryParam
    from hippo_engine.llm.openai_client import OpenAIClient

    def responder(messages):
        user = messages[-1]["content"]
        lines = [ln for ln in user.splitlines() if ln.startswith("[")]
        hit = next((ln for ln in lines if "Ilse Marrow" in ln), lines[0])
        n = hit[1:hit.index("]")]
        return f"Passage [{n}] names her. [99]\nAnswer: Ilse Marrow [{n}]"

    indexer = make_rag(tmp_path / "idx")
    indexer.index(CORPUS)
    indexer.close()
    with FakeOpenAIServer(responder=responder, max_requests=10) as srv:
        rag = make_rag(tmp_path / "idx", llm=OpenAIClient("m", base_url=srv.base_url, api_key="k"))
        sols, _, _ = rag.rag_qa(["Who mapped Lake Veloria?"], param=QueryParam(use_filter=False))
        assert len(srv.requests) == 1
        assert srv.requests[0]["body"]["messages"][-1]["content"].startswith("[1] Wikipedia Title: ")
    sol = sols[0]
    assert sol.answer == "Ilse Marrow" and sol.invalid_citations == 1
    shown = sol.passage_ids[:5]
    assert len(sol.citations) == 1 and sol.citations[0] in shown
    assert sol.docs[shown.index(sol.citations[0])].startswith("Ilse Marrow\n")
    rag.close()
