"""Who uses an embedded PostgreSQL server: a reference count kept by the operating system.

Each user of a data directory's server (each :class:`~.server.EmbeddedPostgres` that started or
attached to it) holds a shared ``flock`` on ``<data_dir>.users`` for as long as it uses the
server. The kernel drops the lock of a process that exits or is killed, so the count never
keeps a dead user. A user that leaves asks for the lock exclusively without waiting: it gets it
only when nobody else holds a share, and then it is the last one out and stops the server.

Joins and leaves happen under the data directory's start/stop lock (``<data_dir>.lock``), so
nobody joins between a last user's check and its stop. A share belongs to the process that took
it: a forked child that inherited it never counts as the last user.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path


class ServerUsers:
    """This object's share of the users lock of one data directory (see the module docs)."""

    def __init__(self, data_dir: Path):
        self.path = Path(str(data_dir) + ".users")
        self._fd: int | None = None
        self._pid: int | None = None

    @property
    def joined(self) -> bool:
        """Whether this object holds a share (in this process)."""
        return self._fd is not None and self._pid == os.getpid()

    def join(self) -> None:
        """Take a share (blocks only while a last user is stopping the server)."""
        if self.joined:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._pid = fd, os.getpid()

    def leave(self) -> bool:
        """Give the share back (if held); returns whether nobody else holds one, i.e. whether
        the caller may stop the server. A share inherited through ``fork`` is dropped without
        asking: the process that took it still counts."""
        fd, pid = self._fd, self._pid
        self._fd = self._pid = None
        if fd is not None and pid != os.getpid():
            os.close(fd)
            return False
        if fd is None:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError:
                return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)


__all__ = ["ServerUsers"]
