"""Issue 39, item 1: one memory has one document list, however a document arrived.

The bundled sample corpus is indexed with the command line (``hippo-engine index``, extractor ``ner``, the
packaged embedder), then served (``hippo-engine serve`` in a subprocess on 127.0.0.1, with an access key).
Every view must show the same list and counts: ``GET /documents`` (and ``GET /documents/{id}``),
``/workspaces``, ``/stats``, MCP ``memory_stats`` (the SDK's client at the server's ``/mcp``), the web page's
Documents and Statistics tabs (Debian's chromium through Playwright) and ``hippo-engine stats``. Then one
document is deleted through each door in turn (the command line, HTTP, MCP ``forget``, Python
``HippoRAG.delete``) while the server runs, and every view must see each deletion.
"""
from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn", reason="the server extra")
pytest.importorskip("mcp", reason="the server extra")

from service.integration.test_http_server import KEY, Serve  # noqa: E402

from hippo_engine import HippoRAG  # noqa: E402
from reproduce.web_screenshot import CHROMIUM, VIEWPORT, launch_chromium, sample, watch  # noqa: E402

pytestmark = pytest.mark.integration

CORPUS = [{"id": f"doc-{i:02d}", "title": d["title"], "text": d["text"]} for i, d in enumerate(sample()["corpus"])]
IDS = [d["id"] for d in CORPUS]


def cli(*args: str) -> dict:
    """Run ``hippo-engine`` (this interpreter's) and parse the first JSON object it prints."""
    r = subprocess.run([sys.executable, "-m", "hippo_engine.cli", *args], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.JSONDecoder().raw_decode(r.stdout.strip())[0] if r.stdout.strip().startswith("{") else {}


def mcp_stats(url: str) -> dict:
    """MCP ``memory_stats`` through the SDK's client at ``url`` (a server's ``/mcp``), with the access key."""
    return mcp_call(url, "memory_stats", {})


def mcp_call(url: str, tool: str, arguments: dict) -> dict:
    import anyio
    import httpx2  # the MCP SDK's HTTP client library
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def main() -> dict:
        async with httpx2.AsyncClient(headers={"X-API-Key": KEY}, timeout=httpx2.Timeout(30, read=300)) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                res = await client.call_tool(tool, arguments)
                assert not res.is_error, res.content
                return dict(res.structured_content)
    # in a thread of its own: Playwright's synchronous API keeps an event loop running in this one
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, main).result()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(the index folder, the server): the sample corpus indexed with the command line, then served."""
    folder = tmp_path_factory.mktemp("doors")
    corpus, save_dir = folder / "corpus.json", folder / "memory"
    corpus.write_text(json.dumps(CORPUS))
    cli("index", str(corpus), "--save-dir", str(save_dir), "--extractor", "ner")
    server = Serve(save_dir, None)
    try:
        yield save_dir, server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: the web page's views need Debian's chromium (.ci/run installs it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package (the test extra)")
    with sync_api.sync_playwright() as pw:
        b = launch_chromium(pw)
        yield b
        b.close()


def web_views(browser, base: str) -> tuple[list[str], int]:
    """(the ids the Documents tab lists, the Statistics tab's indexed documents) in a fresh page; no console
    error, no request elsewhere."""
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(f"window.sessionStorage.setItem('hippo.apiKey', {KEY!r});")
    page = context.new_page()
    page.set_default_timeout(60_000)
    seen = watch(page, base)
    try:
        page.goto(base + "/")
        page.click("#tab-documents")
        page.wait_for_selector("#docs-body tr[data-id]")
        listed = page.eval_on_selector_all("#docs-body tr[data-id]", "rows => rows.map(r => r.dataset.id)")
        statuses = page.eval_on_selector_all("#docs-body tr[data-id]", "rows => rows.map(r => r.dataset.status)")
        assert set(statuses) == {"indexed"}, statuses
        page.click("#tab-stats")
        page.wait_for_selector("#stats section.stat-card")
        stats = page.eval_on_selector_all("#stats section.stat-card", """cards => {
            const card = cards.find(c => c.querySelector("h3").textContent === "documents");
            const dt = [...card.querySelectorAll("dt")].find(d => d.textContent === "indexed");
            return dt.nextElementSibling.textContent; }""")
    finally:
        context.close()
    assert not seen["errors"] + seen["elsewhere"], seen
    return listed, int(stats.replace(",", ""))


def views(save_dir, server, browser) -> dict:
    """The document list and counts as each door shows them."""
    c = server.client
    r = c.get("/documents", params={"limit": 100})
    assert r.status_code == 200, r.text
    listing = r.json()
    spaces = {w["name"]: w["documents"] for w in c.get("/workspaces").json()["workspaces"]}
    stats = c.get("/stats").json()
    mcp = mcp_stats(server.url + "/mcp")
    page_ids, page_stats = web_views(browser, server.url)
    return {"http_ids": [d["id"] for d in listing["documents"]], "http_total": listing["total"],
            "http_statuses": {d["status"] for d in listing["documents"]}, "workspaces": spaces["default"],
            "stats_indexed": stats["documents"]["indexed"], "mcp_indexed": mcp["documents"]["indexed"],
            "page_ids": page_ids, "page_stats": page_stats,
            "cli_documents": cli("stats", "--save-dir", str(save_dir))["documents"]}


def check(v: dict, want: list[str]) -> None:
    n = len(want)
    assert v["http_ids"] == want and v["http_total"] == n and v["http_statuses"] <= {"indexed"}
    assert v["workspaces"] == v["stats_indexed"] == v["mcp_indexed"] == v["cli_documents"] == v["page_stats"] == n, v
    assert v["page_ids"] == want


def test_every_door_lists_what_the_command_line_indexed_and_sees_each_doors_deletes(served, browser):
    save_dir, server = served
    check(views(save_dir, server, browser), IDS)
    one = server.client.get(f"/documents/{IDS[0]}")
    assert one.status_code == 200
    doc = one.json()
    assert doc["status"] == "indexed" and CORPUS[0]["text"] in doc["text"] and doc["job_id"] is None

    left = list(IDS)
    cli("delete", "--ids", left[1], "--save-dir", str(save_dir))                      # the command line
    left.remove(IDS[1])
    check(views(save_dir, server, browser), left)
    assert server.client.get(f"/documents/{IDS[1]}").status_code == 404

    r = server.client.post("/documents/delete", json={"ids": [IDS[2]]})              # HTTP
    assert r.status_code == 200 and r.json()["deleted"] == [IDS[2]], r.text
    left.remove(IDS[2])
    check(views(save_dir, server, browser), left)

    forgot = mcp_call(server.url + "/mcp", "forget", {"ids": [IDS[3]]})              # MCP
    assert forgot["deleted"] == [IDS[3]], forgot
    left.remove(IDS[3])
    check(views(save_dir, server, browser), left)

    with HippoRAG(save_dir, extractor="ner", show_progress=False) as rag:
        assert rag.delete(ids=[IDS[4]])["documents"]["removed"] == [IDS[4]]                  # Python
        assert [d["id"] for d in rag.documents()["documents"]] == [d for d in left if d != IDS[4]]
    left.remove(IDS[4])
    check(views(save_dir, server, browser), left)
