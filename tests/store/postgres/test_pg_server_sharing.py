"""One embedded PostgreSQL server, many users: every object that started or attached uses the
server until its stop(); the last one out stops it, whoever started it; a process killed
without stop() leaves a server that the next user's stop() stops; an object never stops a
server that another object still uses (issue 20, items 3 and 4)."""
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
from hippo_engine.store.postgres.server import SOCKET_PATH_LIMIT, EmbeddedPostgres  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]

# A process that drives one EmbeddedPostgres: a command per line on stdin, a JSON reply per line.
# The server modules are loaded without the engine package's slow imports (empty parent packages).
CHILD = textwrap.dedent("""
    import json, os, sys, types
    for name in ("hippo_engine", "hippo_engine.store", "hippo_engine.store.postgres"):
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(sys.argv[2], *name.split("."))]
        sys.modules[name] = pkg
    import psycopg
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    srv = EmbeddedPostgres(sys.argv[1])
    for line in sys.stdin:
        cmd = line.strip()
        try:
            if cmd == "start":
                out = {"dsn": srv.start(), "started": srv.started}
            elif cmd == "query":
                with psycopg.connect(srv.dsn()) as c:
                    out = {"one": c.execute("SELECT 1").fetchone()[0]}
            elif cmd == "stop":
                out = {"stopped": srv.stop()}
            else:                    # "exit": leave without stop()
                print("{}", flush=True)
                break
        except Exception as e:
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)
""")


class Child:
    """A process with its own EmbeddedPostgres on ``data``, driven command by command."""

    def __init__(self, data: Path):
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(data), str(ROOT)], cwd=ROOT, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def send(self, cmd: str) -> None:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()

    def reply(self) -> dict:
        line = self.proc.stdout.readline()
        assert line, f"the child process failed (exit {self.proc.wait()})"
        return json.loads(line)

    def __call__(self, cmd: str) -> dict:
        self.send(cmd)
        return self.reply()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def exit(self) -> int:
        self.send("exit")
        self.reply()
        return self.proc.wait(timeout=60)


@pytest.fixture
def children():
    made: list[Child] = []

    def make(data: Path) -> Child:
        made.append(Child(data))
        return made[-1]

    yield make
    for child in made:
        if child.proc.poll() is None:
            child.kill()


def postmaster_pid(data: Path) -> int:
    return int((data / "postmaster.pid").read_text().splitlines()[0])


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def no_server_works_in(data: Path) -> bool:
    """No live process works in ``data`` (a postmaster and its backends change into it)."""
    target = str(data.resolve())
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and os.readlink(f"/proc/{entry.name}/cwd") == target and not gone(int(entry.name)):
                return False
        except OSError:
            continue
    return True


def test_two_processes_start_one_folder_at_once_and_the_last_one_out_stops_it(pg_dirs, children):
    data = pg_dirs() / ("d" * 100) / "pg"         # too long for a socket in the data directory
    assert len(str(data / server_mod.SOCKET_NAME)) > SOCKET_PATH_LIMIT
    a, b = children(data), children(data)
    a.send("start")
    b.send("start")                               # both at once, on a folder that does not exist yet
    got = {"a": a.reply(), "b": b.reply()}
    assert got["a"]["dsn"] == got["b"]["dsn"], got
    assert sorted(g["started"] for g in got.values()) == [False, True]
    starter, other = (a, b) if got["a"]["started"] else (b, a)
    sock = Path(got["a"]["dsn"].split("'")[1])   # host='<socket directory>'
    assert sock != data and len(str(sock / server_mod.SOCKET_NAME)) <= SOCKET_PATH_LIMIT
    assert starter("stop") == {"stopped": False}  # the other process still uses the server
    assert other("query") == {"one": 1}
    assert EmbeddedPostgres(data).running()
    assert other("stop") == {"stopped": True}     # the last one out stops it, though it did not start it
    assert not EmbeddedPostgres(data).running() and not sock.exists()
    assert a.exit() == 0 and b.exit() == 0


def test_an_object_stops_no_server_that_another_object_uses(pg_dirs):
    data = pg_dirs() / "pg"
    first, second = EmbeddedPostgres(data), EmbeddedPostgres(data)
    first.start()
    second.start()
    assert first.started and not second.started
    assert not first.stop() and second.running()      # started it, but the second object uses it
    assert second.stop() and not second.running()
    # a stale object: its server was stopped by another, and a newer object started a new one
    stale, newer = EmbeddedPostgres(data), EmbeddedPostgres(data)
    stale.start()
    assert EmbeddedPostgres(data).stop(force=True)
    newer.start()
    assert stale.started and newer.started
    assert not stale.stop() and newer.running()       # the newer server is left alone
    assert newer.stop() and not newer.running()


def test_a_killed_starter_leaves_a_server_that_the_next_users_stop_stops(pg_dirs, children):
    data = pg_dirs() / "pg"
    owner = children(data)
    assert owner("start")["started"]
    pid = postmaster_pid(data)
    owner.kill()                                  # no stop(), no exit handler
    srv = EmbeddedPostgres(data)
    srv.start()
    assert not srv.started and postmaster_pid(data) == pid      # attached to the orphaned server
    t = time.perf_counter()
    assert srv.stop()                             # the last user stops it, though it did not start it
    assert time.perf_counter() - t < 10 and not srv.running()
    deadline = time.monotonic() + 10
    while not (gone(pid) and no_server_works_in(data)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid) and no_server_works_in(data) and not (data / "postmaster.pid").exists()


def test_a_starter_that_exits_without_stop_stops_its_server_when_it_is_the_last_user(pg_dirs, children):
    data = pg_dirs() / "pg"
    owner, user = children(data), children(data)
    assert owner("start")["started"] and not user("start")["started"]
    assert owner.exit() == 0                      # another process still uses the server: it stays
    assert user("query") == {"one": 1}
    assert user.exit() == 0                       # the last user exits without stop(): stopped at exit
    assert not EmbeddedPostgres(data).running() and not (data / "postmaster.pid").exists()
