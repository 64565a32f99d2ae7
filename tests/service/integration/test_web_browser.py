"""The web page in a real browser (issue 23): Debian's chromium (/usr/bin/chromium, never a downloaded
build) driven by Playwright against the real server (uvicorn on 127.0.0.1, a free port) over the real
engine (extractor ``ner``, the packaged embedder) holding the bundled sample corpus, added through the
API. The reader behind POST /answer is a scripted OpenAI-compatible server on 127.0.0.1
(tests/openai_server.py). The server has an access key: each page enters it in the settings form.

Load the page, run a query (keyboard), open a passage's explanation (seeds and paths), see the graph
drawn (Cytoscape's nodes, pixels on its canvas), follow an answer's citation, add a document and see
its job reach indexed, find it, delete it and see it gone; statistics; a workspace of its own. No
console error, no uncaught exception, no request to any other host.
"""
from __future__ import annotations

import io
import re
import urllib.parse
import urllib.request

import pytest

from reproduce import web_screenshot as web
from reproduce.web_screenshot import CHROMIUM, VIEWPORT, add_and_wait, ask, call, open_explanation, sample, watch

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} not found: the browser test needs Debian's chromium (.ci/run installs it; "
                "apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright's Python package (the test extra)")
pytest.importorskip("uvicorn", reason="the server extra")
pytest.importorskip("fastapi", reason="the server extra")

from openai_server import FakeOpenAIServer  # noqa: E402

KEY = "web-test-key"
QUESTION = sample()["questions"][0]["question"]      # the founder of the Vellmar Observatory's birthplace
NEW_DOC = {"id": "web-note", "title": "Quarry Lantern",
           "text": "The Quarry Lantern <b>festival</b> <img src=x onerror=\"window.__injected = 1\"> is held in "
                   "Pellwick every spring. Tova Brann founded the Quarry Lantern festival."}
NEW_QUESTION = "Who founded the Quarry Lantern festival?"
WAIT_MS = 180_000      # a job's wait: the machine may be busy and the worker indexes in batches


def reader(messages) -> str:
    """The scripted reader: answers with the title of passage [1] and cites it (grounded: the title is
    in that passage)."""
    line = next(ln for ln in messages[-1]["content"].splitlines() if ln.startswith("[1] Wikipedia Title: "))
    return f"Passage [1] settles it.\nAnswer: {line.removeprefix('[1] Wikipedia Title: ').strip()} [1]"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(base URL, scripted reader): the server over a fresh memory holding the sample corpus."""
    with FakeOpenAIServer(responder=reader, max_requests=20) as llm:
        options = {"extractor": "ner", "show_progress": False, "llm_model_name": "m", "llm_base_url": llm.base_url,
                   "llm_api_key": "k"}
        with web.web_server(tmp_path_factory.mktemp("web") / "memory", options, access_key=KEY) as base:
            docs = [{"title": d["title"], "text": d["text"]} for d in sample()["corpus"]]
            job = add_and_wait(base, docs, key=KEY)
            assert job["status"] == "done" and job["progress"]["indexed"] == len(docs), job
            yield base, llm


def api(base: str, method: str, path: str, body=None):
    """(status, JSON) of one API call with the access key."""
    return call(base, method, path, body, key=KEY)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as pw:
        b = web.launch_chromium(pw)
        yield b
        b.close()


@pytest.fixture
def page(browser, server):
    """A fresh page on the server with the access key in the tab's session (as the settings form
    leaves it: test_the_key_from_the_settings_form enters it there); fails the test on any console
    error, uncaught exception or request to another host."""
    base, _ = server
    context = browser.new_context(viewport=VIEWPORT)
    context.add_init_script(f"window.sessionStorage.setItem('hippo.apiKey', {KEY!r});")
    pg = context.new_page()
    pg.set_default_timeout(60_000)
    seen = watch(pg, base)
    pg.goto(base + "/")
    yield pg
    problems = seen["errors"] + [f"request to {u}" for u in seen["elsewhere"]]
    context.close()
    assert not problems, problems


def card_ids(pg) -> list[str]:
    return pg.eval_on_selector_all("#results > li.passage", "cards => cards.map(c => c.dataset.id)")


def test_query_explanation_and_graph(page, server):
    base, _ = server
    assert page.title() == "hippo-engine"
    assert page.get_attribute("#tab-search", "aria-selected") == "true"
    ask(page, QUESTION, 5)
    status, want = api(base, "POST", "/retrieve", {"query": QUESTION, "top_k": 5, "explain": True})
    assert status == 200
    result = want["results"][0]
    assert card_ids(page) == [p["id"] for p in result["passages"]]
    widths = page.eval_on_selector_all("#results .score-bar .bar-fill",
                                       "bars => bars.map(b => parseFloat(b.style.width))")
    assert widths[0] == 100.0 and widths == sorted(widths, reverse=True) and widths[-1] > 0

    # the explanation: seeds with their shares, paths with the facts on their edges
    box = open_explanation(page, 1)
    assert page.get_attribute("#results > li.passage >> nth=0 >> button.why", "aria-expanded") == "true"
    ex = result["explanations"][0]
    seeds = box.locator("tr.seed-row th").all_text_contents()
    top_seed = max(ex["seeds"], key=lambda s: s["share"])
    assert seeds and seeds[0].startswith(top_seed["entity"])
    shares = box.locator("tr.seed-row td.share").all_text_contents()
    assert shares[0].strip() == f"{100 * top_seed['share']:.1f}%"
    assert ex["paths"] and box.locator("li.path").count() == len(ex["paths"])
    nodes = [n.removeprefix("passage: ") for n in ex["paths"][0]["nodes"]]     # a passage node shows its title
    assert box.locator("li.path >> nth=0 >> .chain .node").all_text_contents() == nodes
    assert "Placed by" in box.locator("p.summary").text_content()
    page.click("#results > li.passage >> nth=0 >> button.why")          # closes again
    assert box.is_hidden()

    # the graph: Cytoscape holds the /subgraph nodes and has drawn them
    status, graph = api(base, "GET", "/subgraph?" + urllib.parse.urlencode({"query": QUESTION, "top_k": 5}))
    assert status == 200 and graph["nodes"]
    got = page.evaluate("() => { const cy = window.hippo.graph.instance(); "
                        "return [cy.nodes().length, cy.edges().length, cy.nodes('.seed').length]; }")
    assert got[0] == len(graph["nodes"]) and got[1] > 0 and got[2] > 0
    assert page.locator("#graph canvas").count() > 0
    assert drawn_colours(page.locator("#graph").screenshot()) > 20
    # a passage in the graph's list (the keyboard's way into the graph) opens its card
    page.click(".graph-list summary")
    second = card_ids(page)[1]
    page.click(f"#graph-list button[data-node='passage:{second}']")
    assert page.eval_on_selector_all("#results > li.passage.highlight", "cards => cards.map(c => c.dataset.id)") \
        == [second]
    assert page.evaluate("() => window.hippo.graph.instance().$(':selected').id()") == f"passage:{second}"
    assert "passage" in page.text_content("#graph-info")

    # the tabs by keyboard
    page.focus("#tab-search")
    page.keyboard.press("ArrowRight")
    assert page.get_attribute("#tab-documents", "aria-selected") == "true" and page.is_visible("#panel-documents")
    page.keyboard.press("ArrowLeft")
    assert page.is_visible("#panel-search")


def test_other_modes_say_how_they_ranked(page, server):
    """The dense mode: its own ranking, and an explanation that says it is by similarity alone."""
    base, _ = server
    page.select_option("#mode", "naive")
    with page.expect_request(lambda r: r.url.endswith("/retrieve") and r.post_data_json["mode"] == "naive"):
        ask(page, QUESTION, 3)
    want = api(base, "POST", "/retrieve", {"query": QUESTION, "top_k": 3, "mode": "naive"})[1]["results"][0]
    assert card_ids(page) == [p["id"] for p in want["passages"]]
    page.click("#results > li.passage >> nth=0 >> button.why")
    assert "similarity to the query alone" in page.text_content("#explain-1")
    page.wait_for_function("() => document.getElementById('graph-info').textContent.includes('hipporag2')")


def drawn_colours(png: bytes) -> int:
    """How many distinct colours a screenshot holds (a blank canvas has one)."""
    import matplotlib.image as mpimg
    pixels = mpimg.imread(io.BytesIO(png), format="png")
    flat = (pixels.reshape(-1, pixels.shape[-1])[:, :3] * 255).round().astype(int)
    return len({tuple(p) for p in flat[:: max(1, len(flat) // 20000)]})


def test_answer_with_clickable_citations(page, server):
    base, llm = server
    page.fill("#query", QUESTION)
    page.click("#answer-button")
    page.wait_for_selector("#answer:not([hidden])")
    cited = page.locator("#answer-text button.cite")
    assert cited.count() >= 1 and cited.first.text_content() == "1"
    assert "Ilse Marrow" in page.text_content("#answer-text") or page.locator("#results > li.passage").count()
    cited.first.click()
    focused = page.evaluate("() => document.activeElement.dataset.id")
    assert focused == card_ids(page)[0]
    assert page.locator("#results > li.passage >> nth=0").get_attribute("class").split().count("highlight") == 1
    assert page.locator("#answer-sources li").count() >= 1
    assert llm.requests, "the reader was not asked"


def test_add_find_and_delete_a_document(page, server):
    base, _ = server
    page.click("#tab-documents")
    page.fill("#doc-title", NEW_DOC["title"])
    page.fill("#doc-id", NEW_DOC["id"])
    page.fill("#doc-text", NEW_DOC["text"])
    page.click("#add-button")
    page.wait_for_selector("#jobs li.job[data-status=done]", timeout=WAIT_MS)
    job = page.locator("#jobs li.job >> nth=0")
    assert job.locator(".badge[data-status=indexed]").all_text_contents() == ["indexed"]
    row = page.locator(f"#docs-body tr[data-id='{NEW_DOC['id']}']")
    row.wait_for()
    assert row.get_attribute("data-status") == "indexed" and NEW_DOC["title"] in row.text_content()

    # found by a query, its markup shown as text (never parsed)
    page.click("#tab-search")
    ask(page, NEW_QUESTION, 3)
    top = api(base, "POST", "/retrieve", {"query": NEW_QUESTION, "top_k": 1})[1]["results"][0]["passages"]
    assert card_ids(page)[:1] == [top[0]["id"]] and top[0]["doc_ids"] == [NEW_DOC["id"]]
    first = page.locator("#results > li.passage >> nth=0")
    assert "<b>festival</b>" in first.text_content() and first.locator("img, b").count() == 0
    assert page.evaluate("() => window.__injected") is None

    # deleted with its in-place confirmation, then gone from the list, the API and the results
    page.click("#tab-documents")
    row.locator("button", has_text="Delete").click()
    row.locator("button.danger").click()
    row.wait_for(state="detached")
    assert "Deleted web-note" in page.text_content("#docs-status")
    assert api(base, "GET", f"/documents/{NEW_DOC['id']}")[0] == 404
    after = api(base, "POST", "/retrieve", {"query": NEW_QUESTION, "top_k": 5})[1]["results"][0]["passages"]
    assert all("Quarry Lantern" not in p["text"] for p in after)


def test_statistics(page, server):
    base, _ = server
    page.click("#tab-stats")
    page.wait_for_selector("#stats section.stat-card")
    stats = api(base, "GET", "/stats")[1]
    text = page.text_content("#stats")
    assert "indexed" in text and str(stats["documents"]["indexed"]) in text
    assert stats["extractor"] in text


def test_a_workspace_of_its_own(page, server):
    """Named in the settings: the page's calls go to /w/<name>/; a document added there stays there."""
    base, _ = server
    page.fill("#workspace", "webspace")
    page.click("#settings-form button[type=submit]")
    page.click("#tab-documents")
    page.fill("#doc-text", "Mirel Oss repaired the clock tower of Pellwick.")
    page.fill("#doc-id", "ws-note")
    with page.expect_request(re.compile(r"/w/webspace/documents$")):
        page.click("#add-button")
    page.wait_for_selector("#jobs li.job[data-status=done]", timeout=WAIT_MS)
    page.locator("#docs-body tr[data-id='ws-note']").wait_for()
    assert api(base, "GET", "/w/webspace/documents/ws-note")[0] == 200
    assert api(base, "GET", "/documents/ws-note")[0] == 404
    page.reload()                                   # the choice stays for the tab's session
    assert page.input_value("#workspace") == "webspace"


def test_the_key_from_the_settings_form(browser, server):
    """Without the key the page says what is missing; entered in the form, the calls carry it."""
    base, _ = server
    context = browser.new_context(viewport=VIEWPORT)
    pg = context.new_page()
    try:
        pg.goto(base + "/")
        pg.click("#tab-stats")
        pg.wait_for_selector("#stats-status[data-kind=error]")
        assert "API key" in pg.text_content("#stats-status")
        pg.fill("#api-key", KEY)
        with pg.expect_request(lambda r: r.url.endswith("/stats") and r.headers.get("x-api-key") == KEY):
            pg.click("#settings-form button[type=submit]")
        pg.wait_for_selector("#stats section.stat-card")
        assert pg.evaluate("() => window.sessionStorage.getItem('hippo.apiKey')") == KEY
    finally:
        context.close()


def test_page_files_are_served(server):
    """Every file the page lists is served (without the key: the page asks for it itself)."""
    from hippo_engine.service.web import FILES, WEB_DIR
    base, _ = server
    for name in FILES:
        with urllib.request.urlopen(f"{base}/{name}", timeout=30) as resp:
            assert resp.status == 200 and resp.read() == (WEB_DIR / name).read_bytes()
