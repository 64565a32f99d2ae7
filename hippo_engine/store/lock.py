"""One writer at a time per index: a lock file in the index folder (``filelock``).

``WriterLock.held()`` wraps every write of an index (``index``, ``delete``): a second writer
(another process, or another ``HippoRAG`` on the same folder) waits up to ``timeout`` seconds and
then fails with :class:`IndexLockedError`, naming the folder and the holder (pid, host, since
when). Readers take no lock: SQLite gives them a consistent snapshot, and they notice a newer
index version before their next query (``Index.refresh``).
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from hippo_engine.store.base import StoreError

LOCK_NAME = "write.lock"


class IndexLockedError(StoreError):
    """Another writer holds the index folder for longer than the configured wait."""


class WriterLock:
    """The writer lock of the index in ``save_dir`` (re-entrant within one holder)."""

    def __init__(self, save_dir: Path, timeout: float, on_acquire: Callable[[], None] | None = None):
        self.save_dir = Path(save_dir)
        self.on_acquire = on_acquire   # called each time the lock is taken (not on re-entry)
        self.path = self.save_dir / LOCK_NAME
        self.owner_path = self.save_dir / f"{LOCK_NAME}.owner"
        self.timeout = timeout
        self._lock = FileLock(self.path)

    def holder(self) -> str:
        """Who holds the lock, as far as its owner file says."""
        try:
            o = json.loads(self.owner_path.read_text(encoding="utf-8"))
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(o["since"])))
            return f"pid {o['pid']} on {o['host']} since {since}"
        except (OSError, ValueError, KeyError, TypeError):
            return "an unknown process"

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lock for the duration of the ``with`` block."""
        try:
            self._lock.acquire(timeout=self.timeout)
        except Timeout:
            raise IndexLockedError(
                f"the index in {self.save_dir} is being written by {self.holder()}; gave up after waiting "
                f"{self.timeout:g} s (storage setting write_lock_timeout). One writer at a time; readers need "
                f"no lock.") from None
        with self._holding():
            yield

    @contextlib.contextmanager
    def held_if_free(self) -> Iterator[bool]:
        """Hold the lock for the ``with`` block if nobody else does (no waiting); yields whether it is held."""
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            yield False
            return
        with self._holding():
            yield True

    @contextlib.contextmanager
    def _holding(self) -> Iterator[None]:
        """The acquired lock's ``with`` body: note the holder, release at the end."""
        try:
            if self._lock.lock_counter == 1:
                with contextlib.suppress(OSError):
                    self.owner_path.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                                           "since": time.time()}), encoding="utf-8")
                if self.on_acquire is not None:
                    self.on_acquire()
            yield
        finally:
            self._lock.release()
