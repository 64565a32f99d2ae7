"""Background ingestion: :class:`Ingestor`, the worker thread of one memory.

It claims pending documents in batches from the job store (:mod:`.jobstore`: atomically, so workers in
several processes over one index never share a document), indexes them with
``rag.index(texts, ids=..., metadata=...)`` (the index's writer lock serialises writers) and records each
document ``indexed`` or ``failed`` with its error. A batch that fails is retried one document at a time, so
one bad document fails alone; a passing failure (the index busy past its lock timeout, the database
unreachable) gives the claims back to the queue, up to ``max_attempts`` tries; running out of file descriptors
(``EMFILE``/``ENFILE``, :func:`exhausted`) gives them back without limit, waiting longer each time (a document
never fails for it).

Exactly once: indexing an id with the text it already has is a no-op, so a worker killed between the
index's commit and the status update leaves a claim that the next start resets (:meth:`Ingestor.recover`);
indexing it again changes nothing and marks it indexed. Deletes: a document deleted while claimed is
removed from the index by the worker after its batch (:meth:`Ingestor.purge`), under the writer lock.
Another process's worker may index a version added again between the purge's check and its removal (it finds
the old version still there, so its ``index`` call changes nothing); the purge then queues such documents again
(:meth:`.jobstore.JobStore.requeue`), so none stays ``indexed`` while the index lacks it.
"""
from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from hippo_engine.service.jobs import DELETED, Owner, indexed_text, owner_alive
from hippo_engine.service.jobstore import JobStore
from hippo_engine.store.registry import transient_errors

logger = logging.getLogger(__name__)

#: seconds between checks for claims of owners that are gone (and tombstones left to remove)
STALE_CHECK_S = 30.0


class IndexTarget(Protocol):
    """What the worker uses of the index it fills (a ``HippoRAG``): ``index`` with ids and metadata,
    ``delete`` by ids, its configuration (its storage backend: which errors are passing) and its
    state (the writer lock)."""

    config: Any
    index_state: Any

    def index(self, docs: Sequence[str], *, ids: Sequence[str], metadata: Sequence[dict | None]) -> Any: ...

    def delete(self, *, ids: Sequence[str]) -> dict: ...


#: errors that say the process ran out of a resource (file descriptors): passing, retried without limit
EXHAUSTED_ERRNOS = (errno.EMFILE, errno.ENFILE)
EXHAUSTED_TEXTS = ("too many open files", "unable to open database file")
#: ``max_attempts`` for claims given back because files ran out: never reached
NEVER = 2 ** 62
#: the longest wait between two tries while resources are exhausted
EXHAUSTED_MAX_WAIT_S = 30.0


def exhausted(e: BaseException) -> bool:
    """Whether ``e`` (or an error it was raised from) says the process has too many open files
    (``EMFILE``/``ENFILE``, or SQLite's "unable to open database file" that they cause): the documents
    are not at fault, so they are tried again later and never fail for it."""
    seen: set[int] = set()
    err: BaseException | None = e
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in EXHAUSTED_ERRNOS:
            return True
        if any(t in str(err).lower() for t in EXHAUSTED_TEXTS):
            return True
        err = err.__cause__ or err.__context__
    return False


def describe(e: BaseException) -> str:
    """An error as a document's ``error``: its type and message."""
    return f"{type(e).__name__}: {e}"[:2000]


class Ingestor:
    """Indexes the queue of ``store`` into ``rag`` in a background thread (:meth:`start`).

    ``lock`` serialises this worker's use of ``rag`` with other users in the process. ``after_index`` (for
    tests): called after each ``rag.index`` call and before its statuses are recorded."""

    def __init__(self, rag: IndexTarget, store: JobStore, lock: threading.RLock, *, batch_size: int = 32,
                 poll_s: float = 0.5, max_attempts: int = 5, owner: Owner | None = None):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self.rag, self.store, self.lock = rag, store, lock
        self.batch_size, self.poll_s, self.max_attempts = batch_size, float(poll_s), max_attempts
        self.owner = owner or Owner.current()
        self.after_index: Callable[[list[str]], None] | None = None
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        self._busy = threading.Event()
        self._empty = threading.Event()     # the last look at the queue found nothing (cleared by wake)
        self._exhausted_wait = 1.0
        #: errors that say the index is busy or unreachable (its storage backend's), not that a document is bad
        self._transient = transient_errors(rag.config.storage_backend)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Index in a daemon thread until :meth:`stop`; its first step recovers what a killed worker left
        (:meth:`recover`), so opening a memory never waits for the index's writer lock."""
        self._thread = threading.Thread(target=self._loop, name=f"hippo-ingest {self.store.location}", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look for work now (after an add) rather than after ``poll_s``."""
        self._empty.clear()
        self._wake.set()

    @property
    def idle(self) -> bool:
        """Whether this worker has nothing to do as far as it knows: it runs no batch and its last look
        found the queue empty, with no add since (a worker that is not running is idle)."""
        if not self.running:
            return True
        return self._empty.is_set() and not self._busy.is_set()

    def stop(self, timeout: float | None = 60.0) -> None:
        """Stop after the current batch (its statuses are recorded first)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("ingestion worker of %s still busy after %s s; leaving it", self.store.location, timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def recover(self) -> int:
        """Reset the claims of workers that are gone (their documents are pending again) and remove from the
        index the deleted documents whose removal they left undone. Returns how many claims changed."""
        n = self.store.reset_stale(lambda o: owner_alive(o, self.owner))
        if n:
            logger.info("%s: reset %d claim(s) of ingestion workers that are gone", self.store.location, n)
        left = self.store.unpurged()
        if left:
            self.purge(left)
        return n

    def _loop(self) -> None:
        last_check, delay = -float("inf"), self.poll_s
        while not self._stop.is_set():
            try:
                if time.monotonic() - last_check > STALE_CHECK_S:
                    last_check = time.monotonic()
                    self.recover()
                done = self.run_once()
                delay = self.poll_s
            except Exception:   # noqa: BLE001 - the worker outlives any one failure; it is logged
                logger.exception("ingestion worker of %s: a step failed; retrying", self.store.location)
                done, delay = 0, min(max(delay * 2, 0.5), 30.0)
            if not done:
                self._wake.wait(delay)
                self._wake.clear()

    # ------------------------------------------------------------------ work
    def run_once(self) -> int:
        """Claim one batch and index it; returns how many documents were claimed (0: the queue is empty)."""
        self._empty.clear()
        batch = self.store.claim(str(self.owner), self.batch_size)
        if not batch:
            self._empty.set()
            return 0
        self._busy.set()
        try:
            self._process(batch)
        finally:
            self._busy.clear()
        return len(batch)

    def _process(self, batch: list[dict]) -> None:
        owner = str(self.owner)
        try:
            with self.lock:
                self._index(batch)
            outcomes: list[tuple[str, int, str | None]] = [(d["id"], d["rev"], None) for d in batch]
        except Exception as e:  # noqa: BLE001 - passing failures go back to the queue, others are recorded
            if self._give_back(batch, e):
                return
            outcomes = self._one_by_one(batch, e)
        self._exhausted_wait = 1.0
        gone = self._until_done(lambda: self.store.finish(owner, outcomes))
        if gone:
            self.purge(gone)

    def _give_back(self, batch: list[dict], e: Exception) -> bool:
        """After a passing failure (the backend's transient errors, or files ran out: :func:`exhausted`), give the
        claims back to the queue and wait before the next try (doubling while files stay exhausted, up to
        :data:`EXHAUSTED_MAX_WAIT_S`); False for another failure."""
        out_of_files = exhausted(e)
        if not out_of_files and not isinstance(e, self._transient):
            return False
        msg, owner = describe(e), str(self.owner)
        logger.warning("%s: indexing %d document(s) failed for now (%s); they go back to the queue",
                       self.store.location, len(batch), msg)
        tries = NEVER if out_of_files else self.max_attempts
        self._until_done(lambda: self.store.release(owner, [d["id"] for d in batch], msg, tries))
        wait = 1.0
        if out_of_files:
            wait, self._exhausted_wait = self._exhausted_wait, min(self._exhausted_wait * 2, EXHAUSTED_MAX_WAIT_S)
        self._stop.wait(wait)
        return True

    def _one_by_one(self, batch: list[dict], error: Exception) -> list[tuple[str, int, str | None]]:
        """After a batch failed: each document alone, so only the bad ones fail."""
        if len(batch) == 1:
            logger.warning("%s: document %r failed: %s", self.store.location, batch[0]["id"], describe(error))
            return [(batch[0]["id"], batch[0]["rev"], describe(error))]
        logger.info("%s: a batch of %d failed (%s); indexing its documents one at a time", self.store.location,
                    len(batch), describe(error))
        out: list[tuple[str, int, str | None]] = []
        for d in batch:
            try:
                with self.lock:
                    self._index([d])
                out.append((d["id"], d["rev"], None))
            except Exception as e:  # noqa: BLE001 - recorded as the document's error
                if exhausted(e):     # not the document's fault: back to the queue, never failed for it
                    self._until_done(lambda d=d, e=e: self.store.release(str(self.owner), [d["id"]], describe(e),
                                                                         NEVER))
                    continue
                logger.warning("%s: document %r failed: %s", self.store.location, d["id"], describe(e))
                out.append((d["id"], d["rev"], describe(e)))
        return out

    def _index(self, batch: Sequence[dict]) -> None:
        texts = [indexed_text(d["text"], d["title"]) for d in batch]
        ids = [d["id"] for d in batch]
        self.rag.index(texts, ids=ids, metadata=[d["metadata"] for d in batch])
        if self.after_index is not None:
            self.after_index(ids)

    def _until_done(self, step: Callable):
        """Run a job store step until it succeeds (a claim must not stay open while this worker lives);
        gives up only when stopping (the next start resets the claims)."""
        delay = 0.2
        while True:
            try:
                return step()
            except Exception:
                if self._stop.is_set():
                    raise
                logger.exception("%s: recording statuses failed; retrying in %.1f s", self.store.location, delay)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    # ------------------------------------------------------------------ deletes
    def purge(self, ids: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
        """Remove from the index the tombstones ``ids`` nobody claims and the ids ``extra`` the queue does not
        know (or knows as deleted), both checked again under the writer lock, so a document added again
        meanwhile stays. Returns the ``extra`` ids the index held.

        A writer in another process takes its own lock, so a document may still be added again and judged
        indexed (its old version was there) between this check and the removal; such documents are queued
        again (:meth:`.jobstore.JobStore.requeue`)."""
        with self.lock, self.rag.index_state.lock.held():
            still = self.store.unpurged(ids)
            known = self.store.statuses(extra)
            unknown = [d for d in dict.fromkeys(extra) if known.get(d, DELETED) == DELETED]
            gone = list(dict.fromkeys([*still, *unknown]))
            removed: list[str] = []
            if gone:
                report = self.rag.delete(ids=gone)
                removed = list(report.get("documents", {}).get("removed", []))
            if still:
                self.store.mark_purged(still)
            again = self.store.requeue(gone) if gone else []
            if again:
                logger.info("%s: %d document(s) added again while being removed from the index are queued "
                            "again: %s", self.store.location, len(again), ", ".join(again[:5]))
                self.wake()
        return [d for d in unknown if d in set(removed)]


__all__ = ["STALE_CHECK_S", "IndexTarget", "Ingestor", "describe", "exhausted"]
