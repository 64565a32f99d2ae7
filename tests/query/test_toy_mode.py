"""A mode is one search class and one registration line: a mode written here, in the test suite, with no
other file edited, is served by every door: ``hippo-engine retrieve --help`` and ``--mode``, ``POST /retrieve``
and the OpenAPI schema's enum, the web page's list (``GET /modes``, and the page itself in chromium), the MCP
``recall`` tool and ``HippoRAG.retrieve``. On real components: the packaged embedder, ``extractor="ner"``,
the bundled sample corpus, the real server on 127.0.0.1."""
from __future__ import annotations

import json

import anyio
import numpy as np
import pytest

from hippo_engine.config import QueryParam
from hippo_engine.datatypes import QuerySolution
from hippo_engine.modes import ModeSpec, mode_names, register_mode, unregister_mode
from hippo_engine.retrieve.encoding import encode_queries
from hippo_engine.retrieve.search import QuerySearch, SearchParts

pytestmark = pytest.mark.integration
pytest.importorskip("fastapi", reason="the server extra")
pytest.importorskip("uvicorn", reason="the server extra")

TOY = "toy_farthest"
QUESTION = "In which city was the founder of the Vellmar Observatory born?"


class FarthestSearch(QuerySearch):
    """The toy mode: the passages least like the query first (dense cosine, ascending)."""

    def __init__(self, spec, parts: SearchParts):
        super().__init__(spec, parts.hirag.ranked_contexts, parts.hirag.passage_contexts, reader=parts.reader,
                         restrictor=parts.restrictor)
        self.parts = parts

    @classmethod
    def build(cls, spec, parts):
        return cls(spec, parts)

    def retrieve(self, queries: list[str], param: QueryParam) -> list[QuerySolution]:
        r = self.parts.retriever()
        _, q_pass = encode_queries(self.parts.encoder(), queries, self.parts.retrieval)
        dense = r.dense_scores(q_pass)
        k = param.top_k or self.parts.retrieval.retrieval_top_k
        out = []
        for j, q in enumerate(queries):
            order = np.argsort(dense[:, j], kind="stable")[:k]
            out.append(r.views.passages.solution(q, order, dense[order, j]))
        return out


@pytest.fixture(scope="module")
def toy():
    register_mode(ModeSpec(TOY, lambda: FarthestSearch, "the least similar passages first"))
    yield TOY
    unregister_mode(TOY)


@pytest.fixture(scope="module")
def memory(tmp_path_factory, toy):
    """Workspaces over a fresh folder holding the sample corpus (added through the service's queue)."""
    from hippo_engine.service.workspaces import Workspaces
    from reproduce.web_screenshot import sample
    ws = Workspaces(tmp_path_factory.mktemp("toy"), rag_options={"extractor": "ner", "show_progress": False},
                    memory_options={"batch_size": 5, "poll_s": 0.1})
    mem = ws.get(None, create=True)
    job = mem.add([{"id": f"s{i}", "title": d["title"], "text": d["text"]} for i, d in enumerate(sample()["corpus"])])
    assert mem.wait(job["job_id"], timeout=600)
    yield ws, mem
    ws.close()


def _farthest(mem, k: int) -> list[str]:
    """The toy ranking computed here from the dense mode's whole ranking: its last ``k``, reversed."""
    n = len(mem.rag.index_state)
    ranked = mem.rag.retrieve([QUESTION], n, mode="naive")[0]
    return list(reversed(ranked.passage_ids))[:k]


def test_the_engine_serves_the_registered_mode(memory, toy):
    _, mem = memory
    got = mem.rag.retrieve([QUESTION], 3, mode=toy)[0]
    assert got.passage_ids == _farthest(mem, 3) and len(got.doc_ids) == 3
    assert QueryParam(mode=toy).mode == toy


def test_the_cli_offers_and_runs_the_mode(memory, toy, capsys, tmp_path):
    from hippo_engine.cli import main
    with pytest.raises(SystemExit) as e:
        main(["retrieve", "--help"])
    assert e.value.code == 0 and toy in capsys.readouterr().out
    _, mem = memory
    save_dir = str(mem.rag.save_dir)
    assert main(["retrieve", "--save-dir", save_dir, "--extractor", "ner", "-q", QUESTION, "--mode", toy,
                 "--top-k", "2", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    rows = out if isinstance(out, list) else out.get("results", out)
    assert json.dumps(rows).count("chunk-") >= 2


def test_the_mcp_recall_tool_takes_the_mode(memory, toy):
    from mcp import Client

    from hippo_engine.service.mcp_server import build_mcp
    ws, mem = memory

    async def main():
        async with Client(build_mcp(ws)) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            schema = json.dumps(tools["recall"].input_schema)
            result = await client.call_tool("recall", {"query": QUESTION, "top_k": 3, "mode": toy})
            return schema, result

    schema, result = anyio.run(main)
    assert toy in schema
    assert not result.is_error, result
    text = json.dumps(result.structured_content if result.structured_content is not None else
                      [c.text for c in result.content])
    assert all(pid in text for pid in _farthest(mem, 3))


def test_http_openapi_and_the_web_page_list_the_mode(memory, toy):
    from hippo_engine.service.app import create_app
    from hippo_engine.service.settings import ServiceSettings
    from reproduce.web_screenshot import call, uvicorn_thread
    ws, mem = memory                      # the app closes the workspaces when it stops: this test runs last
    settings = ServiceSettings(save_dir=str(ws.root), mount_mcp=False)
    with uvicorn_thread(create_app(settings, workspaces=ws)) as base:
        status, body = call(base, "POST", "/retrieve", {"query": QUESTION, "top_k": 3, "mode": toy})
        assert status == 200, body
        got = body["results"][0]
        assert got["mode"] == toy and [p["id"] for p in got["passages"]] == _farthest(mem, 3)
        status, schema = call(base, "GET", "/openapi.json")
        assert status == 200 and toy in json.dumps(schema["components"]["schemas"]["RetrieveRequest"])
        status, modes = call(base, "GET", "/modes")
        assert status == 200 and [m["name"] for m in modes["modes"]] == list(mode_names())
        assert toy in [m["name"] for m in modes["modes"]]
        _page_lists(base, toy)


def _page_lists(base: str, toy: str) -> None:
    """The web page's mode list, in chromium where it is installed."""
    from reproduce.web_screenshot import CHROMIUM, launch_chromium
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: the page's list is checked through GET /modes only")
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package (the test extra)")
    with sync_api.sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            page = browser.new_page()
            page.goto(base + "/")
            page.wait_for_selector(f"#mode option[value='{toy}']", state="attached", timeout=60_000)
            values = page.eval_on_selector_all("#mode option", "os => os.map(o => o.value)")
            assert values == ["", *mode_names()]
        finally:
            browser.close()
