"""Shared fixtures of the adapter tests: one real memory over the bundled sample corpus (the real embedder,
extractor="ner": no LLM) and a scripted OpenAI-compatible server on 127.0.0.1 whose answer depends on
whether the retrieved passages reached the model."""
from __future__ import annotations

import json
import os
from importlib import resources

import pytest
from openai_server import FakeOpenAIServer

# offline: Haystack sends usage telemetry unless told not to (read when haystack is first imported)
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")



def sample() -> dict:
    return json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))


@pytest.fixture(scope="session")
def corpus() -> list[dict]:
    return sample()["corpus"]


@pytest.fixture(scope="session")
def rag(tmp_path_factory, corpus):
    """The sample corpus, ids ``s0``.., metadata ``{"title", "user"}`` (alice: even positions, bob: odd), with
    communities (member listings, no LLM)."""
    from hippo_engine import HippoRAG

    memory = HippoRAG(tmp_path_factory.mktemp("memory"), extractor="ner", show_progress=False)
    memory.index([f"{d['title']}\n{d['text']}" for d in corpus], ids=[f"s{i}" for i in range(len(corpus))],
                 metadata=[{"title": d["title"], "user": "alice" if i % 2 == 0 else "bob"}
                           for i, d in enumerate(corpus)])
    memory.build_communities(max_llm_reports=0)       # member listings: the community modes, no LLM
    yield memory
    memory.close()


def answer_from_context(messages) -> str:
    """What the scripted model says: the birthplace when the passage naming it reached the model."""
    text = json.dumps(messages)
    return "Dunhaven" if "born in the port city of Dunhaven" in text else "I do not know"


@pytest.fixture
def server():
    with FakeOpenAIServer(responder=answer_from_context, max_requests=20) as srv:
        yield srv


@pytest.fixture
def sent():
    """A function: the text of every request a server got."""
    return lambda server: [json.dumps(r["body"]) for r in server.requests]
