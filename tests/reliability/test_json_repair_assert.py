"""Found by ``python -m reproduce fuzz-parsers`` (issue 13): a reply on which ``json_repair``
trips its own ``assert`` escapes every parser as a raw ``AssertionError`` (the lenient JSON reader
catches only ValueError/RecursionError from it), through the recognition filter (documented never
to raise) into ``retrieve``, and through OpenIE into ``index``. Passes once the engine reads such
a reply as unparseable."""
import pytest
from fakes import ScriptedLLM
from helpers import make_rag, toy_respond
from openai_server import FakeOpenAIServer
from test_fault_server import DOCS, QUERIES, open_rag

from hippo_engine.index.openie import OpenIEError, parse_ner, parse_triples
from hippo_engine.lenient_json import parse_json_lenient
from hippo_engine.retrieve.facts.recognition import parse_fact_list

#: the shortest reply found (delta-debugged from three fuzz findings)
TRIPS_JSON_REPAIR = '{"```json{```'


def test_the_lenient_reader_refuses_it_with_value_error():
    with pytest.raises(ValueError):
        parse_json_lenient(TRIPS_JSON_REPAIR)
    with pytest.raises(ValueError):
        parse_fact_list(TRIPS_JSON_REPAIR)
    assert parse_ner(TRIPS_JSON_REPAIR) == [] and parse_triples(TRIPS_JSON_REPAIR) == []


def test_index_and_retrieve_survive_such_a_reply(tmp_path):
    with FakeOpenAIServer([("ok", TRIPS_JSON_REPAIR, "stop")], max_requests=5000) as srv:
        rag = open_rag(tmp_path / "idx", srv.base_url)
        with pytest.raises(OpenIEError):
            rag.index(DOCS)
    built = make_rag(tmp_path / "built", llm=ScriptedLLM(toy_respond))
    built.index(DOCS[:4])
    built.close()
    with FakeOpenAIServer([("ok", TRIPS_JSON_REPAIR, "stop")], max_requests=5000) as srv:
        rag = open_rag(tmp_path / "built", srv.base_url, use_filter=True)
        sols = rag.retrieve(QUERIES, num_to_retrieve=2)
        assert all(len(s.docs) == 2 for s in sols)
