"""Query NER by the LLM (linking="ner"): failed and unreadable calls reach QuerySolution.errors,
and an unreadable reply is dropped from the LLM cache so a rerun asks again."""
from __future__ import annotations

import json

from fakes import ScriptedLLM
from helpers import CORPUS, make_rag, toy_respond

from hippo_engine.llm.base import LLMError
from hippo_engine.llm.cache import CachedLLM


def _query_of(messages) -> str:
    return messages[-1]["content"].split("Passage:\n", 1)[-1]


def test_query_ner_failures_are_recorded_and_bad_replies_not_cached(tmp_path):
    state = {"broken": True}

    def respond(messages):
        q = _query_of(messages)
        if q.startswith("Where") and state["broken"]:
            return "[" * 500 + "no JSON here"           # unreadable (nests too deep)
        if q.startswith("Who") and state["broken"]:
            raise LLMError("HTTP 500 from the test server")
        if q.startswith(("Where", "Who")):
            return json.dumps({"named_entities": ["Velor"]})
        return toy_respond(messages)

    inner = ScriptedLLM(respond)
    llm = CachedLLM(inner, tmp_path / "cache.sqlite")
    rag = make_rag(tmp_path / "idx", llm=llm, linking="ner", query_ner="llm", use_filter=False)
    rag.index(CORPUS)
    queries = ["Where is the Amber Fair held?", "Who founded Tamsin College?"]
    sols = rag.retrieve(queries)
    assert sols[0].errors and "query NER: unparseable reply" in sols[0].errors[0]
    assert sols[1].errors and "query NER" in sols[1].errors[0] and "HTTP 500" in sols[1].errors[0]
    assert all(s.docs for s in sols)                    # still ranked (no entities: dense passages)
    state["broken"] = False
    calls = inner.calls
    sols = rag.retrieve(queries)
    assert inner.calls == calls + 2                     # both asked again: nothing bad was cached
    assert [s.errors for s in sols] == [[], []]
    sols = rag.retrieve(queries)
    assert inner.calls == calls + 2                     # the good replies are cached
