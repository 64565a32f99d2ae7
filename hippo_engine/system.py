"""Facts about the machine the engine runs on, the engine's one worker pool, and atomic file writes."""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; all CPUs where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# The engine's only module-level mutable state: one thread pool, made on first use, shared by
# the dense scans (retrieve.scoring) and the blocked PPR solver (retrieve.ppr). NumPy, SciPy and
# torch release the GIL in the work it runs. Sized by the usable CPUs; each caller caps how many
# of its tasks run at once (``parallel_map(..., workers=)``). A forked child has none of the
# parent's threads, so the pool is forgotten after a fork (``os.register_at_fork``) and the
# child makes its own on first use.
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def worker_pool() -> ThreadPoolExecutor:
    """The shared worker pool (made on first use; a new one in a forked child)."""
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = ThreadPoolExecutor(max_workers=max(2, usable_cpus()), thread_name_prefix="hippo-worker")
    return _POOL


def _forget_pool() -> None:  # runs in a forked child: the parent's threads do not exist there
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def parallel_map(fn: Callable[[T], object], items: Iterable[T], workers: int) -> None:
    """Call ``fn`` on every item, at most ``workers`` at a time on the shared pool (the calling
    thread waits). Items are taken in order by whichever task is free (as a pool of ``workers``
    threads would); the first exception is raised after all tasks have stopped."""
    items = list(items)
    workers = max(1, min(int(workers), len(items)))
    if workers <= 1:
        for it in items:
            fn(it)
        return
    feed = iter(items)
    lock = threading.Lock()

    def drain() -> None:
        while True:
            with lock:
                it = next(feed, feed)
            if it is feed:
                return
            fn(it)

    futures = [worker_pool().submit(drain) for _ in range(workers)]
    errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temp file beside it, fsync, then rename, so a
    crash leaves the old file or the new one, never half of one."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
