"""Workspaces with a lifecycle and a memory that holds no lock across an LLM call (issue 37, items 2-4), on
SQLite with fakes: the reader runs outside the read lock; deleting a workspace during a slow batch holds up no
other workspace; at most ``max_workspaces`` exist (409 over HTTP) and ``max_open`` are open (the least recently
used idle one is closed; all busy: 503 with Retry-After); idle ones are swept and reopen on demand; running out
of file descriptors never fails a document."""
from __future__ import annotations

import errno
import threading
import time

import pytest
from fakes import NgramEncoder, ScriptedLLM
from helpers import CORPUS, make_rag, toy_respond

from hippo_engine.llm.base import LLMError
from hippo_engine.service.ingest import exhausted
from hippo_engine.service.memory import Memory
from hippo_engine.service.workspaces import WorkspaceLimitError, Workspaces, WorkspacesBusyError


class Gate:
    """An LLM respond function that blocks the calls whose prompt contains ``marker`` until :meth:`open`."""

    def __init__(self, marker: str, reply=toy_respond):
        self.marker, self.reply = marker, reply
        self.opened, self.entered = threading.Event(), threading.Event()

    def __call__(self, messages) -> str:
        if self.marker in messages[-1]["content"]:
            self.entered.set()
            assert self.opened.wait(60), "the gate was never opened"
        return self.reply(messages)

    def open(self) -> None:
        self.opened.set()


def _within(seconds: float, fn, *args, **kw):
    """``fn(*args, **kw)`` run in a thread; fails if it takes longer than ``seconds``."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn(*args, **kw)
        except BaseException as e:     # noqa: BLE001 - re-raised below
            out["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} took more than {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"], time.monotonic() - t0


def _until_idle(mem) -> None:
    """Wait until a memory's worker has looked at its queue and found nothing to do."""
    deadline = time.monotonic() + 30
    while not mem.idle:
        assert time.monotonic() < deadline, "the worker never became idle"
        time.sleep(0.02)


def _spaces(root, gate=None, **kw) -> Workspaces:
    llm = ScriptedLLM(gate or toy_respond)
    return Workspaces(root, rag_options={"llm": llm, "encoder": NgramEncoder(), "show_progress": False,
                                         "synonymy_threshold": 0.6, "use_filter": False},
                      memory_options={"poll_s": 0.05, "batch_size": 4}, **kw)


def _reader_reply(messages) -> str:
    if "Question:" in messages[-1]["content"]:
        return "Thought: the passage says so.\nAnswer: Tamsin"
    return toy_respond(messages)


def test_the_reader_runs_without_the_memorys_lock(tmp_path):
    gate = Gate("Question:", _reader_reply)
    mem = Memory(make_rag(tmp_path / "m", use_filter=False, llm=ScriptedLLM(gate)), batch_size=4, poll_s=0.05)
    try:
        mem.add([{"id": f"d{i}", "text": CORPUS[i]} for i in range(4)])
        assert mem.wait(timeout=60)
        answer = threading.Thread(target=lambda: mem.answer("Who founded Tamsin College?"), daemon=True)
        answer.start()
        assert gate.entered.wait(30)           # the reader's LLM call is running (and blocked)
        got, took = _within(10, mem.retrieve, ["Who founded Tamsin College?"], top_k=2)
        assert len(got[0]["passages"]) == 2 and took < 5
        _within(10, mem.stats)
        gate.open()
        answer.join(30)
        assert mem.answer("Who founded Tamsin College?")["answer"] == "Tamsin"
    finally:
        gate.open()
        mem.close()


def test_deleting_a_workspace_during_a_slow_batch_holds_up_no_other_workspace(tmp_path):
    gate = Gate("SLOWDOC")
    spaces = _spaces(tmp_path / "root", gate)
    try:
        spaces.get(None, create=True)
        spaces.get("alpha", create=True).add([{"id": "s", "text": "SLOWDOC Velor is a town in Norwick."}])
        assert gate.entered.wait(30)           # alpha's worker is inside its batch
        deleting = threading.Thread(target=spaces.delete, args=("alpha",), daemon=True)
        deleting.start()
        time.sleep(0.3)
        assert deleting.is_alive()             # waits for the batch
        _, took = _within(5, lambda: spaces.get(None, create=False).stats())
        assert took < 2
        _, took = _within(10, spaces.get, "beta", create=True)
        with pytest.raises(KeyError, match="being deleted"):
            _within(2, spaces.get, "alpha", create=False)
        assert "alpha" not in [w["name"] for w in spaces.list()]
        gate.open()
        deleting.join(60)
        assert not (spaces.root / "workspaces" / "alpha").exists()
        with pytest.raises(KeyError):
            spaces.get("alpha", create=False)
    finally:
        gate.open()
        spaces.close()


def test_at_most_max_workspaces_exist(tmp_path):
    spaces = _spaces(tmp_path / "root", max_workspaces=2)
    try:
        spaces.get("a", create=True)
        spaces.get("b", create=True)
        with pytest.raises(WorkspaceLimitError, match=r"--max-workspaces 2"):
            spaces.get("c", create=True)
        assert not (spaces.root / "workspaces" / "c").exists()
        spaces.get("a", create=True)           # an existing one still opens
        assert spaces.delete("a")
        spaces.get("c", create=True)
    finally:
        spaces.close()


def test_the_least_recently_used_idle_workspace_is_closed_to_open_another(tmp_path):
    spaces = _spaces(tmp_path / "root", max_open=2)
    try:
        spaces.get(None, create=True)
        b = spaces.get("b", create=True)
        b.add([{"id": "kept", "text": CORPUS[0]}])
        assert b.wait(timeout=60)
        _until_idle(spaces.get("a", create=True))
        spaces.get("b", create=False)          # b is now the most recently used
        spaces.get("c", create=True)
        assert spaces.open_names() == ["default", "b", "c"]    # a was closed; the default stays open
        reopened = spaces.get("a", create=False)
        assert spaces.open_names() == ["default", "c", "a"]
        assert reopened.documents()["total"] == 0
        assert spaces.get("b", create=False).document("kept")["status"] == "indexed"   # reopened with its data
    finally:
        spaces.close()


def test_a_busy_workspace_is_not_closed_and_all_busy_is_refused(tmp_path):
    gate = Gate("SLOWDOC")
    spaces = _spaces(tmp_path / "root", gate, max_open=2)
    try:
        spaces.get("queued", create=True).add([{"id": "s", "text": "SLOWDOC Velor is a town in Norwick."}])
        assert gate.entered.wait(30)           # "queued" is indexing: not idle
        held = spaces.lease("held", create=True)
        _until_idle(held.memory)
        spaces.busy_wait_s = 0.5
        t0 = time.monotonic()
        with pytest.raises(WorkspacesBusyError, match="max-open-workspaces") as e:
            spaces.get("third", create=True)
        assert e.value.retry_after > 0 and 0.5 <= time.monotonic() - t0 < 3
        threading.Timer(0.3, held.release).start()
        spaces.busy_wait_s = 5       # "held" becomes idle while "third" waits for room
        spaces.get("third", create=True)       # "held" is idle now: closed to make room; "queued" is not
        assert spaces.open_names() == ["queued", "third"]
    finally:
        gate.open()
        spaces.close()


def test_idle_workspaces_are_closed_and_reopen_on_demand(tmp_path):
    spaces = _spaces(tmp_path / "root", idle_s=0.3)
    try:
        spaces.get(None, create=True)
        mem = spaces.get("a", create=True)
        mem.add([{"id": "x", "text": CORPUS[1]}])
        assert mem.wait(timeout=60)
        deadline = time.monotonic() + 10
        while "a" in spaces.open_names():
            assert time.monotonic() < deadline, "the idle workspace was not closed"
            time.sleep(0.05)
        assert spaces.open_names() == ["default"]
        assert spaces.get("a", create=False).document("x")["status"] == "indexed"
    finally:
        spaces.close()


def test_over_http_the_limits_answer_409_and_503_in_the_error_shape(tmp_path):
    from fastapi.testclient import TestClient

    from hippo_engine.service.app import create_app
    from hippo_engine.service.settings import ServiceSettings
    spaces = _spaces(tmp_path / "root", max_workspaces=1, max_open=1)
    app = create_app(ServiceSettings(save_dir=str(tmp_path / "root"), mount_mcp=False, mount_web=False),
                     workspaces=spaces)
    doc = {"documents": [{"text": "Velor is a town."}]}
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        assert client.post("/w/one/documents", json=doc).status_code == 202
        r = client.post("/w/two/documents", json=doc)
        assert r.status_code == 409 and r.json()["error"]["type"] == "conflict"
        assert "--max-workspaces 1" in r.json()["error"]["message"]
        assert spaces.get("one", create=False).wait(timeout=60)
        held = spaces.lease("one", create=False)
        spaces.max_workspaces, spaces.busy_wait_s = 5, 0.2
        r = client.post("/w/two/documents", json=doc)
        assert r.status_code == 503 and r.headers["retry-after"] == "2"
        assert r.json()["error"]["type"] == "unavailable"
        held.release()
        assert client.post("/w/two/documents", json=doc).status_code == 202
        assert client.get("/w/one/stats").status_code == 200       # reopened on demand (two closed)


def test_running_out_of_files_never_fails_a_document(tmp_path):
    mem = Memory(make_rag(tmp_path / "m", use_filter=False), batch_size=4, poll_s=0.05, max_attempts=1)
    real, calls = mem.writer.index, []

    def index(*a, **kw):
        calls.append(1)
        if len(calls) <= 3:     # the batch, then one by one: files ran out each time
            cause = OSError(errno.EMFILE, "Too many open files")
            raise LLMError("connection failed: [Errno 24] Too many open files") from cause
        return real(*a, **kw)
    mem.writer.index = index
    mem.ingestor._exhausted_wait = 0.05
    try:
        job = mem.add([{"id": "d0", "text": CORPUS[0]}])["job_id"]
        assert mem.wait(job, timeout=60)
        assert mem.document("d0")["status"] == "indexed" and len(calls) >= 4
    finally:
        mem.close()


def test_what_counts_as_out_of_files():
    assert exhausted(OSError(errno.EMFILE, "Too many open files"))
    assert exhausted(OSError(errno.ENFILE, "File table overflow"))
    wrapped = RuntimeError("sqlite failed")
    wrapped.__cause__ = OSError(errno.EMFILE, "x")
    assert exhausted(wrapped)
    assert exhausted(Exception("sqlite3.OperationalError: unable to open database file"))
    assert not exhausted(ValueError("bad document")) and not exhausted(OSError(errno.ENOENT, "missing"))
