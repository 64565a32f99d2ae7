"""What ``serve-load`` and ``serve-restarts`` share: ``hippo-engine serve`` as a subprocess on 127.0.0.1
(:class:`ServerProcess`: started in a process group of its own, so that SIGKILL reaches every worker), the
documents they send (MuSiQue passages and 2WikiMultihopQA passages as API documents), the index of the
MuSiQue subset built in-process with ``extractor="ner"`` (spaCy, no LLM: :func:`build_index`), percentiles,
the machine's load and report paths written without the machine's folders.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import common
from .common import MUSIQUE_TRAIN_DIR, REPO_ROOT, RESULTS_DIR, ForbiddenLLM

OUT_DIR = RESULTS_DIR / "serve"
WIKI_CORPUS = REPO_ROOT.parent / "shared" / "data" / "2wikimultihopqa" / "2wikimultihopqa_corpus.json"
#: seconds a server may take to start (each worker loads the embedder and spaCy)
STARTUP_S = 300.0
#: the engine's options in every run: no LLM anywhere (ner facts, recognition filter off)
ENGINE = {"extractor": "ner", "use_filter": False, "show_progress": False}


def uptime() -> str:
    """``uptime``'s line (the load the figures were measured under)."""
    return common.uptime("uptime unavailable")


def pct(xs: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``xs``, nearest rank on the sorted values (NaN when empty)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def redact(text: str, work: Path) -> str:
    """``text`` with the work folder written ``<work dir>`` (reports name no folder of this machine)."""
    return text.replace(str(Path(work).resolve()), "<work dir>").replace(str(work), "<work dir>")


def command_line(name: str, argv: Sequence[str], work: Path) -> str:
    """``python -m reproduce NAME ARGS`` as run (``argv`` with or without the command's name), the work
    folder written ``<work dir>``."""
    import shlex
    args = list(argv[1:] if list(argv[:1]) == [name] else argv)
    return redact(" ".join(["python -m reproduce", name, *map(shlex.quote, args)]), work)


# ----------------------------------------------------------------------------- documents
def musique_documents(n: int | None = None, data: Path = MUSIQUE_TRAIN_DIR) -> list[dict]:
    """The distinct passages of the MuSiQue subset as API documents ``{id, title, text}`` (id ``mq-NNNN``,
    first ``n`` or all)."""
    corpus = json.loads((Path(data) / "musique_train_corpus.json").read_text(encoding="utf-8"))
    seen: dict[str, dict] = {}
    for d in corpus:
        seen.setdefault(f"{d['title']}\n{d['text']}", {"title": d["title"], "text": d["text"]})
    docs = [{"id": f"mq-{i:04d}", **d} for i, d in enumerate(seen.values())]
    if n is not None and n > len(docs):
        raise ValueError(f"the MuSiQue subset in {data} has {len(docs)} distinct passages, {n} asked for")
    return docs if n is None else docs[:n]


def musique_questions(data: Path = MUSIQUE_TRAIN_DIR) -> list[str]:
    """The 100 questions of the MuSiQue subset."""
    return [q["question"] for q in json.loads((Path(data) / "musique_train.json").read_text(encoding="utf-8"))]


def wiki_documents(n: int, avoid: set[str], prefix: str = "wiki", path: Path = WIKI_CORPUS) -> list[dict]:
    """``n`` distinct 2WikiMultihopQA passages whose indexed text (``title\\ntext``) is not in ``avoid``,
    as API documents with ids ``<prefix>-NNN``."""
    corpus = json.loads(Path(path).read_text(encoding="utf-8"))
    out: list[dict] = []
    seen = set(avoid)
    for d in corpus:
        full = f"{d['title']}\n{d['text']}"
        if full in seen or "\n" in d["title"] or not d["text"].strip():
            continue
        seen.add(full)
        out.append({"id": f"{prefix}-{len(out):03d}", "title": d["title"], "text": d["text"]})
        if len(out) == n:
            return out
    raise ValueError(f"{path} has only {len(out)} usable passages, {n} asked for")


def full_text(doc: dict) -> str:
    """What the index holds for an API document (``title\\ntext``, as the service indexes it)."""
    from hippo_engine.service.jobs import indexed_text
    return indexed_text(doc["text"], doc.get("title"))


# ----------------------------------------------------------------------------- engine in-process
def open_engine(save_dir: Path, storage: str = "sqlite", encoder=None, **overrides):
    """The engine on ``save_dir`` with the served index's options and an LLM that must never be called."""
    from hippo_engine import HippoRAG
    return HippoRAG(save_dir, llm=ForbiddenLLM(), encoder=encoder, storage=storage, **{**ENGINE, **overrides})


def build_index(save_dir: Path, docs: list[dict], storage: str, log=print) -> dict:
    """Index ``docs`` (API documents) into ``save_dir`` once (reused when it already holds exactly them);
    returns ``{"built": bool, "seconds", "documents"}``."""
    from hippo_engine.store.opening import recorded_storage
    ids = [d["id"] for d in docs]
    if recorded_storage(save_dir) is not None:
        rag = open_engine(save_dir, storage)
        try:
            held = sorted(rag.index_state.all_documents())
        finally:
            rag.close()
        if held == sorted(ids):
            return {"built": False, "seconds": None, "documents": len(ids)}
        log(f"{save_dir} holds another index ({len(held)} documents): building it again")
        shutil.rmtree(save_dir)
    t = time.perf_counter()
    rag = open_engine(save_dir, storage)
    try:
        rag.index([full_text(d) for d in docs], ids=ids)
    finally:
        rag.close()
    return {"built": True, "seconds": time.perf_counter() - t, "documents": len(ids)}


# ----------------------------------------------------------------------------- the server
def free_port() -> int:
    """A port of 127.0.0.1 free at the time of the call."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_command() -> list[str]:
    """How to run ``hippo-engine`` with this interpreter's installation."""
    script = Path(sys.executable).with_name("hippo-engine")
    if script.is_file():
        return [str(script)]
    found = shutil.which("hippo-engine")
    if found is None:
        raise RuntimeError("the hippo-engine command is not installed (pip install -e '.[server]')")
    return [found]


@dataclass(frozen=True)
class Launch:
    """How a server is started: ``command`` (what ``serve`` is appended to), extra environment variables, the
    working folder (None: the repository) and ``defaults``: no setting but the index folder, host and port (the
    server's own defaults), instead of the harness's (SQLite, ner, no filter, ``workers``)."""

    command: Sequence[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    defaults: bool = False


class ServerProcess:
    """``hippo-engine serve --save-dir DIR ...`` on 127.0.0.1 in a process group of its own; its output goes
    to ``log``. :meth:`kill` sends SIGKILL to the whole group (uvicorn's supervisor and its workers; an
    embedded PostgreSQL runs in a session of its own and survives); :meth:`stop` asks for a graceful stop."""

    def __init__(self, save_dir: Path, log: Path, *, storage: str = "sqlite", workers: int = 1,
                 extra: Sequence[str] = (), launch: Launch | None = None):
        self.save_dir, self.log_path, self.workers = Path(save_dir), Path(log), workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.launch = launch or Launch(serve_command())
        settings = [] if self.launch.defaults else ["--storage", storage, "--extractor", "ner", "--no-filter",
                                                    "--workers", str(workers)]
        self.args = [*self.launch.command, "serve", "--save-dir", str(self.save_dir), "--host", "127.0.0.1",
                     "--port", str(self.port), *settings, *extra]
        self.proc: subprocess.Popen | None = None
        self.started = 0.0
        self.log_offset = 0     # the log's length at start (a log may hold earlier runs)

    def start(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_offset = self.log_path.stat().st_size if self.log_path.is_file() else 0
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               **self.launch.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True, cwd=str(self.launch.cwd or REPO_ROOT))
        self.started = time.monotonic()
        return self

    def log_text(self) -> str:
        """What this run wrote to the log."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def ready_workers(self) -> int:
        """How many worker processes finished their startup (uvicorn's line)."""
        return self.log_text().count("Application startup complete")

    def wait_ready(self, timeout: float = STARTUP_S, all_workers: bool = True) -> float:
        """Wait until ``/health`` answers (and, with ``all_workers``, every worker finished its startup);
        returns the seconds since :meth:`start`. RuntimeError (with the log's tail) if it exits or times out."""
        import httpx
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=5) as client:
            while True:
                if self.proc is None or self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited ({self.proc and self.proc.returncode}):\n"
                                       f"{self.log_text()[-3000:]}")
                try:
                    ok = client.get(self.url + "/health").status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok and (not all_workers or self.ready_workers() >= self.workers):
                    return time.monotonic() - self.started
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the server did not start in {timeout:.0f} s:\n{self.log_text()[-3000:]}")
                time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the server's process group, then reap it."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(60)

    def stop(self, timeout: float = 120.0) -> int | None:
        """SIGINT (uvicorn's graceful stop: requests in flight finish, workspaces close); SIGKILL to the group
        after ``timeout``. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
            except ProcessLookupError:
                pass
        with_group_gone(self.proc.pid)
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def with_group_gone(pgid: int, timeout: float = 30.0) -> None:
    """Wait until no process of group ``pgid`` is left (uvicorn's workers exit after its supervisor);
    SIGKILL what is left after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def hold_postgres(save_dir: Path):
    """Start (or join) the embedded PostgreSQL server of the index in ``save_dir``; the caller ``stop()``s it.
    Held by the harness, the server outlives the server processes it kills."""
    from hippo_engine.store.opening import POSTGRES_DIR
    from hippo_engine.store.postgres import EmbeddedPostgres
    server = EmbeddedPostgres(Path(save_dir) / POSTGRES_DIR)
    server.start()
    return server


__all__ = ["ENGINE", "OUT_DIR", "Launch", "ServerProcess", "build_index", "command_line", "free_port", "full_text",
           "hold_postgres", "musique_documents", "musique_questions", "open_engine", "pct", "redact", "uptime",
           "wiki_documents"]
