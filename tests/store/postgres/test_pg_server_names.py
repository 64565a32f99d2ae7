"""What the embedded PostgreSQL server takes from outside: a folder name is data and never
reaches a shell; names the server cannot hold are refused up front; a custom port names the
socket; lock files left by a server that is gone, whose process number now belongs to another
process, do not keep the server from starting (issue 20, items 1, 6 and 10)."""
from __future__ import annotations

import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

import pytest

psycopg = pytest.importorskip("psycopg")

from hippo_engine.store.postgres.server import EmbeddedPostgres, ServerError  # noqa: E402


def data_directory(srv: EmbeddedPostgres) -> str:
    """The data directory the running server reports."""
    with psycopg.connect(srv.dsn()) as c:
        return c.execute("SHOW data_directory").fetchone()[0]


def test_shell_syntax_in_the_folder_name_is_never_run(pg_dirs, monkeypatch):
    base = pg_dirs()
    marks = base / "marks"
    marks.mkdir(mode=0o777)
    marks.chmod(0o777)                   # the server's user could write the marks if a shell ran the name
    monkeypatch.setenv("HIPPO_MARK", str(marks / "m"))
    data = base / "x$(touch $HIPPO_MARK)y`touch ${HIPPO_MARK}2`z$HOME" / "pg"
    srv = EmbeddedPostgres(data, timeout=10)
    srv.start()
    try:
        assert data_directory(srv) == str(data)              # the name as given, nothing expanded
        assert list(marks.iterdir()) == []                   # and nothing run
    finally:
        srv.stop()
    assert not srv.running()


def test_quotes_backslashes_and_commas_in_the_folder_name_work(pg_dirs):
    data = pg_dirs() / "a\"b\\c,d'e f é" / "pg"
    srv = EmbeddedPostgres(data, timeout=10)
    srv.start()
    try:
        assert data_directory(srv) == str(data)
        assert srv.socket_dir != data                        # libpq splits hosts at commas: a short socket folder
    finally:
        assert srv.stop()
    assert not srv.running() and not srv.socket_dir.exists()


@pytest.mark.parametrize("name, why", [("line\nbreak", "line break"), ("x" * 950, "bytes long")])
def test_a_folder_name_the_server_cannot_hold_is_refused_up_front(pg_dirs, name, why):
    base = pg_dirs()
    with pytest.raises(ServerError, match=why) as err:
        EmbeddedPostgres(base / name / "pg")
    assert repr(str(base / name / "pg"))[1:40] in str(err.value)     # names the folder
    assert list(base.iterdir()) == []                                 # nothing made


def test_a_custom_port_names_the_socket(pg_dirs):
    data = pg_dirs() / "pg"
    srv = EmbeddedPostgres(data, settings={"port": 5999})
    srv.start()
    try:
        with psycopg.connect(srv.dsn()) as c:                # the DSN names the port of the socket
            assert c.execute("SHOW port").fetchone() == ("5999",)
        assert "port=5999" in srv.dsn() and (data / ".s.PGSQL.5999").exists()
        other = EmbeddedPostgres(data)                       # attaches on the running server's port
        assert other.start() == srv.dsn() and not other.started
        other.stop()
    finally:
        srv.stop()
    with pytest.raises(ServerError, match="port 'x'"):
        EmbeddedPostgres(data, settings={"port": "x"})


def _stale_lock_files(data: Path, pid: int) -> None:
    """Make ``data`` look like the folder of a server killed with its machine: a server's lock
    files, their process number now another process's."""
    srv = EmbeddedPostgres(data)
    srv.start()
    files = [data / "postmaster.pid", data / ".s.PGSQL.5432.lock"]
    texts = [f.read_text() for f in files]
    srv.stop()
    for f, text in zip(files, texts, strict=True):
        f.write_text(str(pid) + "\n" + text.split("\n", 1)[1])


def _sleeper(cwd: str = "/") -> subprocess.Popen:
    """A live process of the server's user (PostgreSQL ignores processes it may not signal)."""
    kw = {}
    if os.geteuid() == 0:
        pw = pwd.getpwnam("nobody")
        kw = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    return subprocess.Popen(["sleep", "120"], cwd=cwd, **kw)


def test_a_stale_pid_file_naming_another_live_process_is_removed(pg_dirs):
    data = pg_dirs() / "pg"
    other = _sleeper()
    try:
        _stale_lock_files(data, other.pid)
        srv = EmbeddedPostgres(data, timeout=5)
        t = time.perf_counter()
        srv.start()                                          # no 30 s wait, no failure
        assert time.perf_counter() - t < 4 and srv.started and srv.running()
        assert other.poll() is None                          # the other process is left alone
        assert srv.stop()
    finally:
        other.kill()
        other.wait()


def test_a_pid_file_naming_a_live_process_of_the_folder_is_kept_with_advice(pg_dirs):
    data = pg_dirs() / "pg"
    _stale_lock_files(data, 1)
    other = _sleeper(cwd=str(data))                          # works in the folder, as a server would
    try:
        (data / "postmaster.pid").write_text(str(other.pid) + "\n" +
                                             (data / "postmaster.pid").read_text().split("\n", 1)[1])
        with pytest.raises(ServerError, match=r"remove .*postmaster\.pid|kill -INT") as err:
            EmbeddedPostgres(data, timeout=2).start()
        assert str(other.pid) in str(err.value)
        assert (data / "postmaster.pid").exists()            # not removed
    finally:
        other.kill()
        other.wait()


def test_stop_never_signals_a_process_that_took_a_dead_servers_pid(pg_dirs):
    data = pg_dirs() / "pg"
    srv = EmbeddedPostgres(data)
    srv.start()
    pid = int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    os.kill(pid, signal.SIGKILL)                             # the server dies; its pid goes to another process
    deadline = time.monotonic() + 10
    while srv.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    other = _sleeper()
    try:
        text = (data / "postmaster.pid").read_text()
        (data / "postmaster.pid").write_text(str(other.pid) + "\n" + text.split("\n", 1)[1])
        assert not srv.stop()                                # the last user: nothing of its server to stop
        time.sleep(0.2)
        assert other.poll() is None                          # and the other process was not signalled
    finally:
        other.kill()
        other.wait()
