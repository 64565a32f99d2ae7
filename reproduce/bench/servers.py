"""The embedded database servers of the reliability and storage benchmarks: PostgreSQL's and
FalkorDB's, each kept in a folder of its index folder and started by the engine itself.

What differs between the two is said once here, by the storage's name: the server's data folder
in an index folder, its object (:class:`~hippo_engine.store.postgres.EmbeddedPostgres` or
:class:`~hippo_engine.store.falkordb.EmbeddedFalkorDB`), whether a server is running on it
(PostgreSQL's ``postmaster.pid``, FalkorDB's ``falkordb.pid`` naming a live process working in the
folder), what is left of it after its last user (:func:`server_left`), and the memory of its
processes (:func:`server_memory`). The benchmarks (``kill-harness``, ``pg-sharing``, ``backends``)
call these instead of a branch of their own per backend.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

#: the backends with an embedded server in the index folder
SERVER_STORAGES = ("postgres", "falkordb")
#: every backend the benchmarks take (``--storage``)
STORAGES = ("sqlite", *SERVER_STORAGES)
#: names of the backends in reports
TITLES = {"sqlite": "SQLite", "postgres": "PostgreSQL", "falkordb": "FalkorDB"}


def server_dir_name(storage: str) -> str | None:
    """The folder of ``storage``'s embedded server in an index folder (None: no server)."""
    if storage == "postgres":
        from hippo_engine.store.opening import POSTGRES_DIR
        return POSTGRES_DIR
    if storage == "falkordb":
        from hippo_engine.store.falkordb.backend import FALKORDB_DIR
        return FALKORDB_DIR
    return None


def server_dirs() -> tuple[str, ...]:
    """The folder names of every embedded server (kept out of scans for temporary files)."""
    return tuple(name for s in SERVER_STORAGES if (name := server_dir_name(s)) is not None)


def data_dir(storage: str, save_dir: Path) -> Path | None:
    """The data folder of the embedded server of the index in ``save_dir`` (None for SQLite)."""
    name = server_dir_name(storage)
    return None if name is None else Path(save_dir) / name


def embedded(storage: str, data: Path):
    """The embedded server object of ``storage`` on the data folder ``data`` (nothing started)."""
    if storage == "postgres":
        from hippo_engine.store.postgres import EmbeddedPostgres
        return EmbeddedPostgres(data)
    if storage == "falkordb":
        from hippo_engine.store.falkordb import EmbeddedFalkorDB
        return EmbeddedFalkorDB(data)
    raise ValueError(f"{storage!r} has no embedded server; one of {SERVER_STORAGES}")


def stop_server(storage: str, save_dir: Path) -> bool:
    """Stop the embedded server of the index in ``save_dir`` whoever uses it (a killed process's
    server outlives it); returns whether one was stopped (False for SQLite or a stopped one)."""
    data = data_dir(storage, save_dir)
    if data is None or not data.exists():
        return False
    try:
        return bool(embedded(storage, data).stop(force=True))
    except Exception:  # noqa: BLE001 - a hung server that neither its shutdown nor SIGTERM stops
        return kill_server(data)


def kill_server(data: Path, wait_s: float = 10.0) -> bool:
    """SIGKILL every process working in the data folder ``data`` (a hung server); returns whether
    there was one."""
    pids = server_pids(data)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    while server_pids(data) and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(pids)


def orphan_running(storage: str, data: Path) -> bool:
    """Whether a server is left running on ``data`` (by a process killed while using it)."""
    if storage == "postgres":
        return data.joinpath("postmaster.pid").exists()
    return embedded(storage, data).server_pid() is not None


def server_pids(data: Path) -> list[int]:
    """Live processes working in the data folder ``data`` (a server and its backends)."""
    from hippo_engine.store.postgres.pidfile import users_of
    return users_of(data)


def server_left(storage: str, data: Path, wait_s: float = 10.0) -> list[str]:
    """What remains of the server of ``data`` after its last user left ([] if nothing): a server
    still answering, or processes still working in the folder after ``wait_s`` seconds."""
    left = []
    if embedded(storage, data).running():
        left.append("server still answers")
    deadline = time.monotonic() + wait_s
    while server_pids(data) and time.monotonic() < deadline:
        time.sleep(0.05)
    if server_pids(data):
        left.append(f"processes still working in {data}: {server_pids(data)}")
    return left


def _proc_kib(pid: int, path: str, key: str) -> int:
    """``key`` (kB) of ``/proc/<pid>/<path>`` (0 if the process or the line is gone)."""
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text(encoding="ascii").splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def server_memory(data: Path) -> dict:
    """Memory of the processes working in ``data`` (the embedded server and, for PostgreSQL, its
    backends): their count, the sum of their resident sizes (VmRSS: shared memory counted in
    each) and of their proportional sizes (Pss: shared pages split between them), in bytes."""
    pids = server_pids(data)
    return {"processes": len(pids), "rss": 1024 * sum(_proc_kib(p, "status", "VmRSS") for p in pids),
            "pss": 1024 * sum(_proc_kib(p, "smaps_rollup", "Pss") for p in pids)}


def falkordb_used_memory(data: Path) -> int:
    """The bytes the FalkorDB server of ``data`` says it holds (``INFO memory``'s ``used_memory``:
    its data, graphs and indexes, without the process's code and free heap)."""
    import redis
    client = redis.Redis(**embedded("falkordb", data).address().client_args())
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


__all__ = ["SERVER_STORAGES", "STORAGES", "TITLES", "data_dir", "embedded", "falkordb_used_memory", "kill_server",
           "orphan_running", "server_dir_name", "server_dirs", "server_left", "server_memory", "server_pids",
           "stop_server"]
