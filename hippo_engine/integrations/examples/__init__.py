"""Runnable examples of the framework adapters, offline on the bundled sample corpus.

Each is ``python -m hippo_engine.integrations.examples.<name> --base-url http://127.0.0.1:PORT/v1``, with an
OpenAI-compatible chat server at that address (a local llama.cpp, vLLM or Ollama server; the tests use a
scripted one): ``haystack_pipeline``, ``agentscope_agent``, ``langchain_chain``, ``llamaindex_query``. The
memory (``extractor="ner"``: no LLM to index) is built in ``--save-dir`` on first use.
"""
from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path
from typing import Any

from hippo_engine.datatypes import passage_text

#: the sample corpus's first two-hop question
DEFAULT_QUESTION = "In which city was the founder of the Vellmar Observatory born?"


def parser(description: str) -> argparse.ArgumentParser:
    """The options every example takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--save-dir", type=Path, default=Path("hippo_example_memory"),
                   help="the memory's folder (built from the bundled sample corpus if new)")
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="an OpenAI-compatible chat server")
    p.add_argument("--model", default="local", help="the model name the server expects")
    p.add_argument("--api-key", default="sk-local", help="the key the server expects (a local one: any)")
    p.add_argument("--mode", default="hipporag2", help="the retrieval mode (see the README's table)")
    p.add_argument("--top-k", type=int, default=3)
    p.add_argument("--question", default=DEFAULT_QUESTION)
    return p


def sample_memory(save_dir: Path, **rag_options: Any):
    """A ``HippoRAG`` in ``save_dir`` holding the bundled sample corpus (indexed once, no LLM)."""
    from hippo_engine import HippoRAG

    rag = HippoRAG(save_dir, **{"extractor": "ner", "show_progress": False, **rag_options})
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    rag.index([passage_text(d["title"], d["text"]) for d in data["corpus"]],
              ids=[f"sample-{i}" for i in range(len(data["corpus"]))],
              metadata=[{"title": d["title"]} for d in data["corpus"]])
    return rag


def show(answer: str, sources: list[dict]) -> dict:
    """Print the answer and its sources (JSON); return them."""
    out = {"answer": answer, "sources": sources}
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return out
