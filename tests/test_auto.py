"""``extractor="auto"`` (:mod:`hippo_engine.auto`): without an LLM server a new index is built
without any LLM call; with an OpenAI-compatible server (a real one on 127.0.0.1, scripted) it runs the
paper's OpenIE; an existing index keeps the extractor it records."""
import json
import logging
from importlib import resources
from pathlib import Path

import pytest
from fakes import NgramEncoder, ScriptedLLM
from helpers import CORPUS, toy_respond
from openai_server import FakeOpenAIServer

from hippo_engine import HippoConfig, HippoRAG
from hippo_engine.auto import (
    NER_RETRIEVAL,
    PAPER_RETRIEVAL,
    choose_extractor,
    llm_configured,
    resolve_auto,
    resolve_retrieval,
)
from hippo_engine.llm.base import LLMClient, LLMError


class FailingLLM(LLMClient):
    """Fails any call, and counts them."""

    model_name = "failing"

    def __init__(self):
        self.calls = 0

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        self.calls += 1
        raise LLMError("an LLM call was made")


@pytest.fixture
def no_llm_server(monkeypatch):
    """The engine's own LLM (what ``make_llm`` builds when no client is passed) fails on any call;
    ``made`` counts how often it was built."""
    client, made = FailingLLM(), []

    def make_llm(*a, **kw):
        made.append(a)
        return client
    monkeypatch.setattr("hippo_engine.llm.factory.make_llm", make_llm)   # the models import it on first use
    return client, made


def test_resolve_auto_is_the_one_choice():
    assert HippoConfig().extractor == "auto"
    cfg, note = resolve_auto(HippoConfig(), llm_configured=False)
    assert cfg.extractor == "ner" and cfg.linking == "auto" and cfg.use_filter is None
    assert "no LLM server configured" in note and "extractor='openie'" in note and "llm_base_url" in note
    cfg, note = resolve_auto(HippoConfig(), llm_configured=True)
    assert cfg.extractor == "openie" and "OpenIE" in note
    assert resolve_auto(HippoConfig(extractor="nary"), False) == (HippoConfig(extractor="nary"), "")


def test_auto_retrieval_settings_follow_the_index_extractor():
    auto = HippoConfig().retrieval
    assert (auto.second_hop, auto.second_hop_head, auto.dense_agree, auto.dense_weight) == ("auto",) * 4
    ner = resolve_retrieval(auto, "ner")
    assert (ner.second_hop, ner.second_hop_head, ner.dense_agree, ner.dense_weight) == ("wide", 2, 0, 1.5) \
        == tuple(NER_RETRIEVAL.values())
    for extractor in ("openie", "nary", None):        # the paper's one walk, no top-rank rule, no dense term
        cfg = resolve_retrieval(auto, extractor)
        assert (cfg.second_hop, cfg.second_hop_head, cfg.dense_agree, cfg.dense_weight) == ("none", 2, 0, 0.0) == \
            tuple(PAPER_RETRIEVAL.values())
    explicit = HippoConfig(second_hop="bridge", dense_agree=0).retrieval
    kept = resolve_retrieval(explicit, "ner")
    assert (kept.second_hop, kept.second_hop_head, kept.dense_agree) == ("bridge", 2, 0)
    given = HippoConfig(second_hop="none", second_hop_head=1, dense_agree=3, dense_weight=0.5).retrieval
    assert resolve_retrieval(given, "ner") == given
    with pytest.raises(ValueError):
        HippoConfig(dense_agree=-1)
    with pytest.raises(ValueError):
        HippoConfig(second_hop="wider")


def test_an_openie_index_keeps_the_papers_one_walk(tmp_path):
    with HippoRAG(tmp_path, llm=ScriptedLLM(toy_respond), encoder=NgramEncoder(), show_progress=False) as rag:
        rag.index(CORPUS[:3])
        cfg = rag.retriever.config
        assert rag.graph_stats()["extractor"] == "openie" and rag.retriever.second_hop is None
        assert (cfg.second_hop, cfg.dense_agree) == ("none", 0)


def test_what_counts_as_a_configured_llm_server():
    assert not llm_configured(HippoConfig())
    assert llm_configured(HippoConfig(llm_base_url="http://127.0.0.1:9/v1"))
    assert llm_configured(HippoConfig(), ScriptedLLM(toy_respond))


def test_an_index_keeps_its_recorded_extractor(tmp_path):
    auto = HippoConfig()
    assert choose_extractor(auto, "openie", True, False, tmp_path).extractor == "openie"
    assert choose_extractor(auto, "ner", True, True, tmp_path).extractor == "ner"
    assert choose_extractor(auto, None, True, False, tmp_path).extractor == "openie"   # written before the record
    assert choose_extractor(HippoConfig(extractor="nary"), "ner", True, False, tmp_path).extractor == "nary"


def test_a_new_index_without_an_llm_server_is_built_without_an_llm_and_says_so_once(tmp_path, no_llm_server, caplog):
    with caplog.at_level(logging.INFO, logger="hippo_engine.progress"):
        rag = HippoRAG(tmp_path / "m", encoder=NgramEncoder(), show_progress=False)
        again = HippoRAG(tmp_path / "m", encoder=NgramEncoder(), show_progress=False)
    said = [r.getMessage() for r in caplog.records if "no LLM server configured" in r.getMessage()]
    assert len(said) == 1 and "extractor='ner'" in said[0] and str(tmp_path / "m") in said[0]
    for r in (rag, again):
        assert r.config.extractor == "ner" and r.extractor.name == "ner" and r.graph_stats()["extractor"] == "ner"
        assert r.index_state.config.extractor == "ner"
        r.close()
    explicit = HippoRAG(tmp_path / "p", extractor="openie", encoder=NgramEncoder(), show_progress=False)
    assert explicit.graph_stats()["extractor"] == "openie"    # the paper's configuration, one argument away
    explicit.close()


def test_with_an_openai_compatible_server_a_new_index_runs_openie(tmp_path):
    with FakeOpenAIServer(responder=toy_respond, max_requests=50) as srv:
        rag = HippoRAG(tmp_path, llm_model_name="m", llm_base_url=srv.base_url, encoder=NgramEncoder(),
                       show_progress=False, llm_cache=False)
        assert rag.config.extractor == "openie"
        report = rag.index(CORPUS[:3])
        assert report["openie_llm_passages"] == 3 and len(srv.requests) == 6     # NER + triples per passage
        assert rag.graph_stats()["extractor"] == "openie" and rag.graph_stats()["fact_edges"] > 0
        rag.close()
    reopened = HippoRAG(tmp_path, encoder=NgramEncoder(), show_progress=False)   # no server now: still openie
    assert reopened.config.extractor == "openie" and reopened.graph_stats()["extractor"] == "openie"
    reopened.close()


# ----------------------------------------------------------------------------- real models
def _sample_docs() -> tuple[list[str], list[str]]:
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    return [f"{d['title']}\n{d['text']}" for d in data["corpus"]], [q["question"] for q in data["questions"]]


@pytest.mark.slow
def test_the_default_on_the_sample_corpus_makes_no_llm_call(tmp_path, no_llm_server):
    """``HippoRAG(dir).index(docs)`` and ``retrieve`` on the real embedder and spaCy: the LLM is never
    even built; reopened with an LLM server configured, the index keeps its extractor."""
    client, made = no_llm_server
    docs, questions = _sample_docs()
    rag = HippoRAG(tmp_path, show_progress=False)
    report = rag.index(docs)
    assert report["added"] == len(docs) and report.get("openie_llm_passages", 0) == 0
    sols = rag.retrieve(questions, num_to_retrieve=5)
    assert all(s.docs and not s.errors for s in sols)
    assert rag.graph_stats()["extractor"] == "ner" and rag.graph_stats()["entity_nodes"] > 0
    assert client.calls == 0 and made == [] and rag.models.llm_client is None
    rag.close()
    with_server = HippoRAG(tmp_path, llm_base_url="http://127.0.0.1:9/v1", show_progress=False)
    assert with_server.config.extractor == "ner"
    with_server.close()


@pytest.mark.slow
def test_the_default_on_2wiki_makes_no_llm_call(tmp_path, no_llm_server):
    """The first 300 passages of 2Wiki (some of the longest included: none is cut by the default
    chunk size), indexed by ``HippoRAG(dir)`` with no LLM configured: no LLM call."""
    shared = Path(__file__).resolve().parents[1].parent / "shared"     # as tests/conftest.py's SHARED
    path = shared / "data" / "2wikimultihopqa" / "2wikimultihopqa_corpus.json"
    if not path.exists():
        pytest.skip(f"benchmark data not found at {path}")
    corpus = json.loads(path.read_text("utf-8"))
    longest = sorted(corpus, key=lambda d: -len(d["text"]))[:5]
    docs = list(dict.fromkeys(f"{d['title']}\n{d['text']}" for d in [*corpus[:300], *longest]))
    client, made = no_llm_server
    rag = HippoRAG(tmp_path, show_progress=False)
    assert rag.index(docs)["added"] == len(docs)                 # one passage per document: none was cut
    assert client.calls == 0 and made == [] and rag.graph_stats()["extractor"] == "ner"
    rag.close()
