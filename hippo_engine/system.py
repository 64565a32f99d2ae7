"""Facts about the machine the engine runs on, the engine's one worker pool, and atomic file writes."""
from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, TypeVar

T = TypeVar("T")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; all CPUs where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# The engine's only module-level mutable state: one thread pool, made on first use, shared by
# the dense scans (retrieve.scoring) and the blocked PPR solver (retrieve.ppr.kernel). NumPy, SciPy and
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
    done = object()

    def drain() -> None:
        while True:
            with lock:
                it = next(feed, done)
            if it is done:
                return
            fn(it)  # type: ignore[arg-type]  # not the sentinel: an item

    futures = [worker_pool().submit(drain) for _ in range(workers)]
    errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e


TEMP_SUFFIX = ".tmp"


def temp_name_prefix(path: str | os.PathLike) -> str:
    """The prefix of the temp files :func:`atomic_write` makes for ``path`` (``.<name>.``)."""
    return f".{Path(path).name}."


def atomic_write(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` atomically: ``write(f)`` fills a temp file beside it (``.<name>.XXXXXXXX.tmp``)
    that is then fsynced and renamed over ``path``, and the folder is fsynced (POSIX), so a crash
    leaves the old file or the new one, never half of one. While it is written the temp file holds
    an exclusive ``flock``: a cleaner (``store.files.remove_orphan_temps``) leaves it alone until
    its writer is gone."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_name_prefix(path), suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            _flock(f.fileno(), blocking=True)
            write(f)
            f.flush()
            os.fsync(f.fileno())   # durable before the rename makes it the file
            os.replace(tmp, path)  # still holding the flock: no cleaner can take it for an orphan
        fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_write`)."""
    data = text.encode("utf-8")

    def write(f) -> None:
        f.write(data)

    atomic_write(path, write)


def fsync_dir(folder: str | os.PathLike) -> None:
    """Make a rename in ``folder`` durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _flock(fd: int, blocking: bool) -> bool:
    """Take an exclusive ``flock`` on ``fd``; False if another holder has it (non-blocking).
    Where there is no ``fcntl`` (Windows) it reports success."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        return True
    except BlockingIOError:
        return False


def file_is_being_written(path: str | os.PathLike) -> bool:
    """True if a live writer holds ``path``'s ``flock`` (see :func:`atomic_write`)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return not _flock(fd, blocking=False)
    finally:
        os.close(fd)   # releases the probe's lock, if taken
