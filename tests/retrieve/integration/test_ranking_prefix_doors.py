"""Issue 38 at every front door: the ranking is one score per passage, whatever ``top_k`` asks for.

The bundled sample corpus is indexed once (``extractor="ner"``, the packaged embedder, no LLM) and every sample
question is ranked at every k in 1..20 (up to the corpus's size) and at k = 20 through each door:

* Python: ``HippoRAG.retrieve(questions, param=QueryParam(top_k=k))``, plain and with ``explain=True``;
* the command line: ``hippo-engine retrieve --queries FILE --top-k k --json`` (its ``main`` in this process at
  every k, and the installed ``hippo-engine`` as a subprocess at k = 20);
* HTTP: ``POST /retrieve {"queries", "top_k"}`` to a real ``hippo-engine serve`` on 127.0.0.1 over the same index;
* MCP: the ``recall`` tool with ``top_k``, through the SDK's client at that server's ``/mcp``.

At each door the top k must be the first k of the top 20 (same passage ids, same order) with the top 20 call's
scores (relative 1e-9), the scores non-increasing, and every door must show the Python door's ranking; with
``explain=True`` each explanation's terms must add up to the score shown. The checks are those of
``python -m reproduce ranking-prefix`` (:mod:`reproduce.ranking_prefix`), which runs them on MuSiQue.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn", reason="the server extra")
pytest.importorskip("mcp", reason="the server extra")

from service.integration.test_http_server import KEY, Serve  # noqa: E402

from hippo_engine.config import QueryParam  # noqa: E402
from reproduce.ranking_prefix import (  # noqa: E402
    TOP,
    Ranking,
    cli_rankings,
    explanation_violations,
    http_rankings,
    mcp_rankings,
    prefix_violations,
    same_rankings,
    solution_ranking,
)
from reproduce.serve_common import sample_corpus  # noqa: E402

pytestmark = pytest.mark.integration

DOCS, QUESTIONS = sample_corpus()
QUERIES = [q["question"] for q in QUESTIONS][:100]
#: the doors other than plain Python, by the fixture that ranks through them
DOORS = ("python_explained", "cli", "http", "mcp")


def _report(bad: list[str], what: str) -> str:
    return f"{what}: {len(bad)} violation(s)\n" + "\n".join(bad[:20])


@pytest.fixture(scope="module")
def rag(tmp_path_factory):
    """The sample corpus indexed once, open for the Python door; the other doors open the same folder."""
    from hippo_engine import HippoRAG
    rag = HippoRAG(tmp_path_factory.mktemp("prefix") / "memory", extractor="ner", show_progress=False)
    try:
        rag.index([f"{d['title']}\n{d['text']}" for d in DOCS], ids=[d["id"] for d in DOCS])
        yield rag
    finally:
        rag.close()


@pytest.fixture(scope="module")
def ks(rag) -> list[int]:
    """Every k checked, then the deepest call (top 20), the reference."""
    return sorted({*range(1, min(TOP, len(rag.index_state)) + 1), TOP})


@pytest.fixture(scope="module")
def python_door(rag, ks) -> dict[int, list[Ranking]]:
    return {k: [solution_ranking(s) for s in rag.retrieve(QUERIES, param=QueryParam(top_k=k))] for k in ks}


@pytest.fixture(scope="module")
def explained(rag, ks) -> dict[int, list]:
    """``retrieve(explain=True)``'s solutions at every k."""
    return {k: rag.retrieve(QUERIES, param=QueryParam(top_k=k, explain=True)) for k in ks}


@pytest.fixture(scope="module")
def python_explained_door(explained) -> dict[int, list[Ranking]]:
    return {k: [solution_ranking(s) for s in sols] for k, sols in explained.items()}


@pytest.fixture(scope="module")
def cli_door(rag, ks) -> dict[int, list[Ranking]]:
    return {k: cli_rankings(rag.save_dir, QUERIES, k) for k in ks}


@pytest.fixture(scope="module")
def server(rag):
    """``hippo-engine serve`` on 127.0.0.1 over the index folder (its default workspace), with an access key."""
    srv = Serve(Path(rag.save_dir), None)
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def http_door(server, ks) -> dict[int, list[Ranking]]:
    return {k: http_rankings(server.client, QUERIES, k) for k in ks}


@pytest.fixture(scope="module")
def mcp_door(server, ks) -> dict[int, list[Ranking]]:
    return mcp_rankings(f"{server.url}/mcp", QUERIES, ks, headers={"X-API-Key": KEY})


def test_the_top_20_call_ranks_every_passage_up_to_20(rag, python_door):
    assert [len(r) for r in python_door[TOP]] == [min(TOP, len(rag.index_state))] * len(QUERIES)


@pytest.mark.parametrize("door", ("python", *DOORS))
def test_top_k_is_the_prefix_of_the_top_20_at_every_door(door, request):
    bad = prefix_violations(door, request.getfixturevalue(f"{door}_door"))
    assert not bad, _report(bad, f"{door}: the top k is the first k of the top 20, same scores, non-increasing")


@pytest.mark.parametrize("door", DOORS)
def test_every_door_shows_the_python_ranking(door, request, python_door):
    bad = same_rankings(door, request.getfixturevalue(f"{door}_door"), python_door, "python")
    assert not bad, _report(bad, f"{door} shows the Python door's passages and scores")


def test_explanation_terms_add_up_to_the_score_shown(explained):
    """ISSUE 38's explain check: for every passage of ``retrieve(explain=True)``, its explanation's
    ``ranked_score`` is the score shown and its terms (seeds' contributions + dense_prior + dense_term, where
    the engine has it) add up to it (relative 1e-6, or within the explanation's ``check``)."""
    bad = [v for k, sols in explained.items() for v in explanation_violations("python explain", k, sols)]
    assert not bad, _report(bad, "EXPLAIN SUM: seeds + dense_prior + dense_term == ranked_score == score shown")


def test_the_installed_command_gives_the_in_process_ranking(rag, cli_door):
    """``hippo-engine retrieve`` as a subprocess (the console script) at k = 20: what ``main`` gave in-process."""
    script = Path(sys.executable).with_name("hippo-engine")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "hippo_engine.cli"]
    real = cli_rankings(rag.save_dir, QUERIES, TOP, command=command)
    bad = same_rankings("cli subprocess", {TOP: real}, cli_door, "cli in-process")
    assert not bad, _report(bad, "the installed command shows what main shows in-process")
