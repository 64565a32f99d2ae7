"""What the ``serve-*`` benchmarks share: real uvicorn on 127.0.0.1 in a thread (:func:`live_server`)
and the memory they serve, the bundled sample corpus indexed with ``extractor="ner"`` and the real
embedder, its reader a scripted OpenAI-compatible server on 127.0.0.1 (:func:`sample_service`)."""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

#: seconds to wait for a server's startup (its lifespan loads the embedder)
STARTUP_S = 300.0


def sample_corpus() -> tuple[list[dict], list[dict]]:
    """The bundled sample corpus as API documents ``{id, title, text}`` and its questions."""
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    docs = [{"id": f"sample-{i}", "title": d["title"], "text": d["text"]} for i, d in enumerate(data["corpus"])]
    return docs, data["questions"]


@contextmanager
def live_server(app: Any, *, log_level: str = "warning") -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free port of 127.0.0.1 in a daemon thread; yields its base URL.
    Stops it (graceful shutdown: the app's lifespan closes what it opened) on exit."""
    import uvicorn
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)   # asyncio sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=10))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="uvicorn")
    thread.start()
    deadline = time.monotonic() + STARTUP_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise RuntimeError("the server did not start (see its log above)")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


@contextmanager
def sample_service(work: Path, *, access_key: str | None = None, settings: dict | None = None,
                   workers_memory: dict | None = None) -> Iterator[tuple[str, Any]]:
    """The sample corpus in a memory under ``work`` (indexed, waited for), served over HTTP by real
    uvicorn: yields ``(base URL, the default workspace's Memory)``. The reader LLM is the scripted
    server of :mod:`reproduce.citations_server`, which answers the sample questions."""
    from hippo_engine.service.app import create_app
    from hippo_engine.service.settings import ServiceSettings
    from hippo_engine.service.workspaces import Workspaces

    from .citations_server import ScriptedReaderServer
    docs, questions = sample_corpus()
    with ScriptedReaderServer({q["question"]: q["answers"] for q in questions}) as llm:
        rag_options = {"extractor": "ner", "llm_model_name": "scripted-reader", "llm_base_url": llm.base_url,
                       "llm_api_key": "none", "show_progress": False}
        ws = Workspaces(work, rag_options=rag_options, memory_options=dict(workers_memory or {}))
        try:
            memory = ws.get(None, create=True)
            job = memory.add(docs)["job_id"]
            if not memory.wait(job, timeout=STARTUP_S):
                raise RuntimeError("the sample corpus was not indexed in time")
            opts = {"save_dir": str(work), "rag_options": rag_options, "access_key": access_key,
                    "mount_web": True, "mount_mcp": True, **(settings or {})}
            app = create_app(ServiceSettings(**opts), workspaces=ws)
        except BaseException:
            ws.close()
            raise
        with live_server(app) as url:       # the app closes the workspaces when it stops
            yield url, memory
