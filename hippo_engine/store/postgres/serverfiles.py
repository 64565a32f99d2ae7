"""Paths and files of the embedded PostgreSQL server (:mod:`.server`): which data directories
it can take, how a value is quoted in a connection string and in ``postgresql.conf``, which
folder its user cannot enter, flushing to disk, and the environment its processes get."""
from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Mapping
from pathlib import Path

#: variables a server process never gets: libpq's (PG*), the engine's (HIPPO_*: the serve settings,
#: the access key), and any key, token, password or secret (OPENAI_API_KEY and the like)
PRIVATE_ENV = re.compile(r"^(PG|HIPPO_)|(^|_)(API_?KEY|KEY|TOKEN|PASSWORD|PASSWD|SECRET)S?(_|$)", re.IGNORECASE)


def server_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of the server's processes: ``environ`` without :data:`PRIVATE_ENV`, locale C (a
    server run as another user must not inherit the secrets of the process that starts it)."""
    env = {k: v for k, v in environ.items() if not PRIVATE_ENV.search(k)}
    env.update(LC_ALL="C", LANG="C")
    return env

#: longest data directory path, in bytes (PostgreSQL's MAXPGPATH is 1024, with room for the files in it)
DATA_DIR_LIMIT = 900


def check_data_dir(path: Path) -> str:
    """Why the server cannot take ``path`` as its data directory ("" if it can). PostgreSQL
    records the path in ``postmaster.pid``, one line per field, and in fixed-size buffers."""
    text = str(path)
    if any(c in text for c in "\n\r\0"):
        return "its path holds a line break"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "its path is not valid UTF-8"
    if size > DATA_DIR_LIMIT:
        return f"its path is {size} bytes long (at most {DATA_DIR_LIMIT})"
    return ""


def quote_conninfo(value: str) -> str:
    """``value`` as a libpq connection string value."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_conf(value: str) -> str:
    """``value`` as a ``postgresql.conf`` string (where a backslash starts an escape)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def parse_port(value: object) -> int | None:
    """``value`` as a port number (1 to 65535), None if it is not one."""
    try:
        port = int(str(value))
    except ValueError:
        return None
    return port if 1 <= port <= 65535 else None


def log_tail(path: Path, lines: int = 8, offset: int = 0) -> str:
    """The last ``lines`` lines of a log file from byte ``offset`` on ("" if unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def untraversable(data_dir: Path, uid: int, gid: int) -> tuple[Path, int] | None:
    """The first existing folder above ``data_dir`` that user ``uid`` (group ``gid``) cannot
    enter, with its mode; None if there is none."""
    for folder in reversed(data_dir.parents):
        try:
            st = folder.stat()
        except OSError:
            continue
        if st.st_uid == uid:
            ok = st.st_mode & 0o100
        elif st.st_gid == gid:
            ok = st.st_mode & 0o010
        else:
            ok = st.st_mode & 0o001
        if not ok:
            return folder, st.st_mode & 0o777
    return None


def sync_filesystem(path: Path) -> None:
    """Flush the file system holding ``path`` to disk (``syncfs``; ``sync`` where it is missing)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if getattr(libc, "syncfs", None) is None or libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["DATA_DIR_LIMIT", "check_data_dir", "fsync_dir", "log_tail", "parse_port", "quote_conf",
           "quote_conninfo", "sync_filesystem", "untraversable"]
