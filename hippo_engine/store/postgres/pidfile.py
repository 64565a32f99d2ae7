"""The lock files of an embedded PostgreSQL data directory: ``postmaster.pid`` and the socket's
``.s.PGSQL.<port>.lock``.

Each names the process of the server that wrote it. A server killed with its machine or
container leaves them behind, and after a restart that number often belongs to another live
process: PostgreSQL then refuses to start ("lock file already exists"). :func:`remove_stale`
recognises that case (the process is not a server of this data directory, and no process works
in the directory at all, so no orphaned backend still uses its shared memory) and removes the
files; a file that names a live server of the directory is left alone, and
:func:`stale_advice` tells the user what to do.

A server's process works in its data directory (PostgreSQL changes into it at start), which is
how a process is recognised as one of the directory's: ``/proc/<pid>/cwd``. Without ``/proc``
nothing is removed.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

PID_FILE = "postmaster.pid"
DEFAULT_PORT = 5432


def socket_name(port: int) -> str:
    """The name of the server's unix socket for ``port``."""
    return f".s.PGSQL.{port}"


@dataclass(frozen=True)
class PidFile:
    """What ``postmaster.pid`` records: the server's process, data directory, port, socket
    directory and state (``starting``, ``ready``, ``stopping``)."""

    pid: int
    data_dir: str
    port: int
    socket_dir: Path | None
    status: str


def read_pid_file(data_dir: Path) -> PidFile | None:
    """``data_dir/postmaster.pid``, or None where there is none (or it is still being written)."""
    try:
        lines = (Path(data_dir) / PID_FILE).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    field = [line.strip() for line in lines] + [""] * 8
    try:
        pid = int(field[0])
    except ValueError:
        return None
    port = int(field[3]) if field[3].isdigit() else DEFAULT_PORT
    return PidFile(pid, field[1], port, Path(field[4]) if field[4] else None, field[7])


def _state(pid: int) -> str | None:
    """The state letter of process ``pid`` (``Z``: exited, not yet reaped), None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else None


def _cwd(pid: int | str) -> str | None:
    """The working directory of a process (None where it is gone or not ours to read)."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def serves(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` is a live process working in ``data_dir`` (a server of it, or without
    ``/proc`` any live process: nothing can be told apart then)."""
    if not Path("/proc/self").exists():
        return _alive(pid)
    state = _state(pid)
    return state is not None and state != "Z" and _cwd(pid) == str(Path(data_dir).resolve())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def users_of(data_dir: Path) -> list[int]:
    """Live processes working in ``data_dir`` (a server and its backends, orphaned or not)."""
    target = str(Path(data_dir).resolve())
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _cwd(entry.name) == target and _state(int(entry.name)) != "Z":
            found.append(int(entry.name))
    return found


def command_line(pid: int) -> str:
    """The command line of ``pid`` (for messages), or ``"gone"``."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "gone" if not _alive(pid) else "unknown"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200] or "unknown"


def _lock_files(data_dir: Path, pf: PidFile) -> list[Path]:
    """``postmaster.pid`` and, where it names the same process, the socket's lock file."""
    files = [Path(data_dir) / PID_FILE]
    if pf.socket_dir is not None:
        sock_lock = pf.socket_dir / (socket_name(pf.port) + ".lock")
        try:
            first = sock_lock.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0].strip()
        except OSError:
            first = ""
        if first == str(pf.pid):
            files.append(sock_lock)
    return files


def remove_stale(data_dir: Path) -> bool:
    """Remove the lock files of a server that is gone when their process number now belongs to
    another live process (PostgreSQL would refuse to start); returns whether files were removed.
    The caller found no server answering on the socket. A number that belongs to no process is
    left to PostgreSQL, which handles it (and its orphaned backends) itself."""
    pf = read_pid_file(data_dir)
    if pf is None or not Path("/proc/self").exists():
        return False
    state = _state(pf.pid)
    if state is None or serves(pf.pid, data_dir):
        return False
    busy = users_of(data_dir)
    if busy:
        logger.warning("%s names process %d, which is not a server of it, but processes %s work in that "
                       "folder: lock file left", Path(data_dir) / PID_FILE, pf.pid, busy)
        return False
    for path in _lock_files(data_dir, pf):
        path.unlink(missing_ok=True)
    logger.warning("removed the stale lock file %s: it named process %d (%s), which is not a PostgreSQL "
                   "server of that folder", Path(data_dir) / PID_FILE, pf.pid, command_line(pf.pid))
    return True


def stale_advice(data_dir: Path) -> str:
    """What to do about a ``postmaster.pid`` that kept a server from starting ("" if none)."""
    pf = read_pid_file(data_dir)
    if pf is None:
        return ""
    path = Path(data_dir) / PID_FILE
    if serves(pf.pid, data_dir):
        return (f"{path} names process {pf.pid} ({command_line(pf.pid)}), a server of this folder that does not "
                f"answer on {pf.socket_dir}; stop it (kill -INT {pf.pid}) and open the index again")
    return (f"{path} names process {pf.pid} ({command_line(pf.pid)}), which is not a server of this folder; if no "
            f"PostgreSQL server uses {data_dir}, remove {path} and open the index again")


__all__ = ["DEFAULT_PORT", "PID_FILE", "PidFile", "command_line", "read_pid_file", "remove_stale", "serves",
           "socket_name", "stale_advice", "users_of"]
