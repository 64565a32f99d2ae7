"""``python -m reproduce web-screenshot``: docs/web.png, the web page of ``hippo-engine serve`` in a
real browser.

Starts the HTTP app (a real uvicorn on 127.0.0.1, a free port) over a fresh memory in a temporary
folder (``extractor="ner"``: no LLM; the packaged embedder), adds the bundled sample corpus through
``POST /documents`` and waits for its job, then drives Debian's chromium (/usr/bin/chromium; never a
downloaded browser build) with Playwright: runs a sample question (default: the second, a two-hop
question), opens the explanation of the passage reached by the longest walk, waits for the graph and
saves a screenshot of the page.

tests/service/integration/test_web_browser.py starts the server and the browser with the same parts.

Example:
    python -m reproduce web-screenshot --out docs/web.png
"""
from __future__ import annotations

import argparse
import contextlib
import json
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import hippo_engine

ROOT = Path(__file__).resolve().parents[1]
#: Debian's chromium (`.ci/run` installs it when missing); Playwright drives it, nothing is downloaded.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SAMPLE = Path(hippo_engine.__file__).parent / "data" / "sample_corpus.json"
#: the server's engine options: memory without an LLM (spaCy NER), the packaged embedder
RAG_OPTIONS: dict[str, Any] = {"extractor": "ner", "show_progress": False}
VIEWPORT = {"width": 1400, "height": 1000}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "web.png",
                    help="the PNG to write (default: %(default)s)")
    ap.add_argument("--question", type=int, default=1,
                    help="which sample question to ask (0-based; default 1, a two-hop question)")
    ap.add_argument("--explain", type=int, default=0,
                    help="whose explanation to open (1-based rank; default 0: the passage with the longest walk)")
    ap.add_argument("--top-k", type=int, default=5, help="passages to show (default 5)")
    ap.add_argument("--save-dir", type=Path, default=None,
                    help="the memory's folder (default: a temporary folder, removed afterwards)")


# ----------------------------------------------------------------------------- the server
def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def uvicorn_thread(app: Any, *, start_timeout: float = 600.0) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a free port) in a thread; yields the base URL once the
    app's startup (which loads the models) is done, and stops the server afterwards."""
    import uvicorn
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("uvicorn stopped before it started (see the log above)")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"uvicorn did not start within {start_timeout:.0f} s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)


@contextlib.contextmanager
def web_server(save_dir: Path, rag_options: dict[str, Any] | None = None, **settings: Any) -> Iterator[str]:
    """``hippo-engine serve``'s app over ``save_dir`` (the MCP server not mounted) on 127.0.0.1."""
    from hippo_engine.service.app import create_app
    from hippo_engine.service.settings import ServiceSettings
    config = ServiceSettings(save_dir=str(save_dir), rag_options=dict(RAG_OPTIONS if rag_options is None
                                                                      else rag_options),
                             mount_mcp=False, **settings)
    with uvicorn_thread(create_app(config)) as url:
        yield url


def call(base: str, method: str, path: str, body: Any = None, *, key: str | None = None,
         timeout: float = 120.0) -> tuple[int, Any]:
    """One JSON API call: (status, parsed body)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Accept": "application/json",
                                          **({"X-API-Key": key} if key else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def sample() -> dict[str, Any]:
    """The bundled sample corpus ({"corpus": [{title, text}], "questions": [...]})."""
    return json.loads(SAMPLE.read_text())


def add_and_wait(base: str, documents: list[dict[str, Any]], *, key: str | None = None,
                 timeout: float = 600.0) -> dict[str, Any]:
    """POST /documents, then GET /jobs/{id} until the job is done or failed; returns the job."""
    status, accepted = call(base, "POST", "/documents", {"documents": documents}, key=key)
    if status != 202:
        raise RuntimeError(f"POST /documents answered {status}: {accepted}")
    deadline = time.monotonic() + timeout
    while True:
        status, job = call(base, "GET", f"/jobs/{accepted['job_id']}", key=key)
        if status != 200:
            raise RuntimeError(f"GET /jobs/{accepted['job_id']} answered {status}: {job}")
        if job["status"] in ("done", "failed"):
            return job
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {accepted['job_id']} not finished after {timeout:.0f} s: {job['progress']}")
        time.sleep(0.3)


# ----------------------------------------------------------------------------- the browser
def launch_chromium(playwright: Any) -> Any:
    """Debian's chromium through Playwright (``executable_path``: no browser download)."""
    if not CHROMIUM.exists():
        raise FileNotFoundError(f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium)")
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


def watch(page: Any, base: str) -> dict[str, list[str]]:
    """Record the page's console errors, uncaught exceptions and requests to anywhere but ``base``."""
    seen: dict[str, list[str]] = {"errors": [], "elsewhere": []}
    page.on("console", lambda m: seen["errors"].append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: seen["errors"].append(f"uncaught: {e}"))
    page.on("request", lambda r: None if r.url.startswith(base + "/") or r.url.startswith("data:")
            else seen["elsewhere"].append(r.url))
    return seen


def ask(page: Any, question: str, top_k: int = 5) -> None:
    """Type the question, retrieve (Enter), wait for the passages and the graph."""
    page.fill("#query", question)
    page.fill("#top-k", str(top_k))
    page.press("#query", "Enter")
    page.wait_for_selector("#results li.passage")
    page.wait_for_function("() => { const cy = window.hippo.graph.instance(); return cy && cy.nodes().length > 0; }")


def open_explanation(page: Any, number: int = 1) -> Any:
    """Open passage ``number``'s explanation (1-based); returns its region once drawn."""
    card = page.locator("#results > li.passage").nth(number - 1)
    card.locator("button.why").click()
    box = page.locator(f"#explain-{number}")
    box.locator("table.seeds, p.note, p.muted").first.wait_for()
    return box


def longest_walk(base: str, question: str, top_k: int) -> int:
    """The rank (1-based) of the passage whose best walk from a seed has the most steps (1 if none)."""
    status, data = call(base, "POST", "/retrieve", {"query": question, "top_k": top_k, "explain": True})
    if status != 200:
        raise RuntimeError(f"POST /retrieve answered {status}: {data}")
    steps = [max((len(p["nodes"]) for p in ex["paths"]), default=0) for ex in data["results"][0]["explanations"]]
    return 1 + max(range(len(steps)), key=lambda i: (steps[i], -i)) if steps else 1


def screenshot(base: str, out: Path, question: str, top_k: int = 5, explain: int = 1) -> dict[str, list[str]]:
    """Load the page, ask ``question``, open passage ``explain``'s explanation and save a PNG at ``out``."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            seen = watch(page, base)
            page.goto(base + "/")
            ask(page, question, top_k)
            open_explanation(page, explain)
            page.wait_for_timeout(300)          # the graph's first frame
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=True)
        finally:
            browser.close()
    return seen


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    data = sample()
    question = data["questions"][args.question]["question"]
    with contextlib.ExitStack() as stack:
        save_dir = args.save_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hippo-web-")))
        t0 = time.perf_counter()
        base = stack.enter_context(web_server(save_dir))
        print(f"server up at {base} after {time.perf_counter() - t0:.1f} s")
        job = add_and_wait(base, [{"title": d["title"], "text": d["text"]} for d in data["corpus"]])
        print(f"sample corpus: job {job['status']}, {job['progress']}")
        if job["status"] != "done" or job["progress"]["failed"]:
            print("error: the sample corpus did not index")
            return 1
        explain = args.explain or longest_walk(base, question, args.top_k)
        seen = screenshot(base, args.out, question, args.top_k, explain)
    for line in seen["errors"] + [f"request elsewhere: {u}" for u in seen["elsewhere"]]:
        print(line)
    print(f"wrote {args.out} (question: {question}; explanation of passage {explain})")
    return 1 if seen["errors"] or seen["elsewhere"] else 0
