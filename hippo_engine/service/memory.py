"""One workspace's memory over one HippoRAG index: :class:`Memory` (thread-safe).

Writes are queued: :meth:`Memory.add` validates documents and records them in the index database (the job
store, :mod:`.jobstore`) before it returns a job id; a background worker (:class:`.ingest.Ingestor`) indexes
them in batches. Reads (retrieve, answer, explain, subgraph, stats) go to the index as it is, one at a time
per ``HippoRAG`` object (they are not thread-safe): with a separate ``writer`` the worker indexes through
that one and readers are never held up by a batch; without, readers and the worker share ``rag``.

Everything returned is a plain JSON-ready dict or list (see :mod:`.results`). Bad input raises
``ValueError`` (or ``TypeError``) with a message naming what is wrong, before anything is written.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Hashable

from hippo_engine.modes import mode_names, mode_spec
from hippo_engine.service import results
from hippo_engine.service.batching import DEFAULT_WINDOW_MS, MAX_BATCH_QUERIES, Gatherer
from hippo_engine.service.ingest import Ingestor
from hippo_engine.service.jobs import FAILED, PENDING, PROCESSING, check_documents
from hippo_engine.service.jobstore import open_job_store

#: the most passages one query may ask for, and the most documents one page lists
MAX_TOP_K = 200
MAX_PAGE = 1000


def _positive(value: object, name: str, most: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
        raise ValueError(f"{name} must be an integer from 1 to {most}, got {value!r}")
    return value


def _texts(values: object, name: str, most: int = 1000) -> list[str]:
    if not isinstance(values, list | tuple) or not values or len(values) > most:
        raise ValueError(f"{name} must be a non-empty list of at most {most} strings")
    for i, v in enumerate(values):
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"{name}[{i}] must be a non-empty string, got {v!r}")
    return list(values)


def _batch_key(top_k: int, mode: str, explain: bool, where: dict | None) -> Hashable | None:
    """What two retrieves must share to run in one batch: every option that changes a result (None: a filter
    that is not plain JSON data, never batched). The filter as written (its repr: keys in their order, 1, 1.0
    and True told apart)."""
    try:
        json.dumps(where, allow_nan=False)
    except (TypeError, ValueError):
        return None
    return (mode, top_k, explain, repr(where))


class Memory:
    """The memory of one index ``rag`` (a ``HippoRAG``, owned from now on: :meth:`close` closes it).

    ``batch_size``: documents per indexing batch; ``worker``: run the background worker in this process (a
    process that only reads, or whose documents another process indexes, passes False); ``poll_s``: how often
    an idle worker looks for documents added by other processes; ``writer``: a second ``HippoRAG`` on the same
    index for the worker's writes (owned too), so queries never wait for a batch; ``batch_window_ms``: how long
    a retrieve waits for concurrent ones to run with it as one batch (:mod:`.batching`; 0: each runs alone,
    as its own ``rag.retrieve``); ``batch_max_queries``: the most queries of one such batch."""

    def __init__(self, rag, *, batch_size: int = 32, worker: bool = True, poll_s: float = 0.5, writer=None,
                 max_attempts: int = 5, batch_window_ms: float = DEFAULT_WINDOW_MS,
                 batch_max_queries: int = MAX_BATCH_QUERIES):
        self.rag = rag
        self.writer = writer if writer is not None else rag
        self._read_lock = threading.RLock()
        self._write_lock = threading.RLock() if writer is not None else self._read_lock
        self.batches = Gatherer(batch_window_ms / 1000.0, max_queries=batch_max_queries, lock=self._read_lock)
        self.store = open_job_store(self.writer)
        self.ingestor = Ingestor(self.writer, self.store, self._write_lock, batch_size=batch_size, poll_s=poll_s,
                                 max_attempts=max_attempts)
        self._closed = False
        if worker:
            self.ingestor.start()

    # ------------------------------------------------------------------ documents
    def add(self, docs: list[dict]) -> dict:
        """Accept documents ``{"id"?, "text", "title"?, "metadata"?}`` for indexing; returns ``{"job_id",
        "documents": [ids]}`` once they are recorded in the index database. Ids default to
        :func:`hippo_engine.ids.document_id` of the indexed text (``"title\\ntext"`` with a title)."""
        checked = check_documents(docs)
        job_id = self.store.add(checked)
        self.ingestor.wake()
        return {"job_id": job_id, "documents": [d.id for d in checked]}

    def job(self, job_id: str) -> dict | None:
        """A job's status, progress and per-document statuses (None: no such job)."""
        if not isinstance(job_id, str) or not job_id:
            raise ValueError(f"job_id must be a non-empty string, got {job_id!r}")
        return self.store.job(job_id)

    def documents(self, status: str | None = None, offset: int = 0, limit: int = 50) -> dict:
        """A page of documents (the order accepted), all or those of one ``status``."""
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < 2**62:
            raise ValueError(f"offset must be an integer from 0 to 2**62 - 1, got {offset!r}")
        return self.store.documents(status, offset, _positive(limit, "limit", MAX_PAGE))

    def document(self, doc_id: str) -> dict | None:
        """One document with its text, title, metadata and status (None: unknown or deleted)."""
        if not isinstance(doc_id, str) or not doc_id:
            raise ValueError(f"doc_id must be a non-empty string, got {doc_id!r}")
        doc = self.store.document(doc_id)
        if doc is not None and doc["text"] is None:        # indexed without the service: its passages say it
            doc["text"] = self._indexed_text(doc_id)
        return doc

    def _indexed_text(self, doc_id: str) -> str | None:
        """The text of an indexed document as the index holds it: its passages in order, one per paragraph
        (a document cut into overlapping chunks shows the overlaps twice)."""
        with self._read_lock:
            state = self.rag.index_state
            pids = state.stored_documents([doc_id])[0].get(doc_id)
            return None if not pids else "\n\n".join(state.stores["passage"].texts(pids))

    def delete(self, ids: list[str]) -> dict:
        """Delete documents by id: from the queue (a pending one is cancelled) and from the index (a document
        being indexed is removed once its batch ends). Ids the queue does not know but the index holds (indexed
        without the service) are deleted too. Returns ``{"deleted": [...], "unknown": [...]}``."""
        ids = _texts(ids, "ids", 10000)
        deleted, unknown = self.store.delete(ids)
        found = set(self.ingestor.purge(deleted, extra=unknown))
        return {"deleted": [d for d in ids if d in set(deleted) | found],
                "unknown": [d for d in unknown if d not in found]}

    def retry_failed(self) -> dict | None:
        """Queue the failed documents again as one job: ``{"job_id", "documents"}`` (None: none failed)."""
        got = self.store.retry_failed()
        if got is None:
            return None
        self.ingestor.wake()
        return {"job_id": got[0], "documents": got[1]}

    def wait(self, job_id: str | None = None, timeout: float = 60.0, poll_s: float = 0.05) -> bool:
        """Wait until job ``job_id`` (None: every queued document) is finished; False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            if job_id is not None:
                job = self.store.job(job_id)
                done = job is None or job["status"] in ("done", FAILED)
            else:
                counts = self.store.counts()
                done = counts[PENDING] + counts[PROCESSING] == 0
            if done:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(poll_s)

    # ------------------------------------------------------------------ queries
    def _empty(self) -> bool:
        return len(self.rag.index_state) == 0

    def _filter(self, where: dict | None) -> dict:
        if where is None:
            return {}
        if not isinstance(where, dict):
            raise ValueError(f"where must be an object (a metadata filter), got {type(where).__name__}")
        return {"where": where}

    def _mode(self, mode: str | None) -> str:
        names = mode_names()
        if mode is not None and mode not in names:
            raise ValueError(f"mode must be one of {', '.join(names)}; got {mode!r}")
        return mode or "hipporag2"

    def retrieve(self, queries: list[str], *, top_k: int = 5, mode: str | None = None, explain: bool = False,
                 where: dict | None = None) -> list[dict]:
        """Rank passages for each query: ``[{"query", "mode", "passages": [{"id", "text", "score", "doc_ids",
        "rank"}], "explanations"?}]`` (``explanations`` with ``explain=True``, ``hipporag2`` mode). Concurrent
        calls with the same options run as one batch (``batch_window_ms``), each getting its own answer."""
        queries = _texts(queries, "queries")
        top_k, mode, explain = _positive(top_k, "top_k", MAX_TOP_K), self._mode(mode), bool(explain)
        extra = self._filter(where)

        def solve(batch: list[str]) -> list:
            """The batch's solutions (None for each on an empty memory), under the read lock."""
            with self._read_lock:
                if self._empty():
                    return [None] * len(batch)
                return list(self.rag.retrieve(batch, top_k, mode=mode, explain=explain, **extra))

        sols = self.batches.run(_batch_key(top_k, mode, explain, where), queries, solve)
        return [results.empty_retrieval(q, mode, explain) if s is None else results.retrieval(s, mode, explain)
                for q, s in zip(queries, sols, strict=True)]

    def answer(self, question: str, *, top_k: int = 5, mode: str | None = None, where: dict | None = None) -> dict:
        """Answer ``question`` from the memory with the reader LLM: ``{"question", "answer", "citations",
        "passages", "notes"}`` (citations: the passages the answer cites).

        The passages (or a hi_* mode's context) are read under the memory's read lock; the reader's LLM
        call runs without it, so a slow LLM never holds up the memory's other queries, its indexing or its
        closing (the reader touches no index: its LLM client is thread-safe, or holds a lock of its own)."""
        from hippo_engine.config import QueryParam
        question = _texts([question], "question")[0]
        top_k, mode = _positive(top_k, "top_k", MAX_TOP_K), self._mode(mode)
        extra = self._filter(where)
        param = QueryParam(mode=mode, top_k=top_k, qa_top_k=top_k, **extra)
        contexts = mode_spec(mode).reads_context
        with self._read_lock:
            self._check_open()
            if self._empty():
                return {"question": question, "answer": None, "citations": [], "passages": [],
                        "notes": ["the memory holds no documents yet"]}
            if contexts:
                ranked = self.rag.retrieve_context([question], param=param)
            else:
                ranked = self.rag.retrieve([question], param=param)
            _ = self.rag.llm    # made here, once, under the lock (two answers never make two clients)
        if not contexts:
            sols = self.rag.qa(ranked, param=param)[0]
            return results.answer(question, sols[0])
        sols = self.rag.queries.read_contexts(ranked, None, param)[0]
        with self._read_lock:
            self._check_open()
            self.rag.queries.attach_ids(sols, param)
        return results.answer(question, sols[0])

    def explain(self, query: str, passage_ids: list[str] | None = None, top: int = 5,
                where: dict | None = None) -> list[dict]:
        """Why the query's top ``top`` passages (or ``passage_ids``) ranked where they did (each an
        ``Explanation.to_dict()``)."""
        query = _texts([query], "query")[0]
        top = _positive(top, "top", MAX_TOP_K)
        if passage_ids is not None:
            passage_ids = _texts(passage_ids, "passage_ids", MAX_TOP_K)
        extra = self._filter(where)
        with self._read_lock:
            if self._empty():
                return []
            if extra and passage_ids is None:
                sol = self.rag.retrieve([query], top, **extra)[0]
                passage_ids = list(sol.passage_ids)
                if not passage_ids:
                    return []
            return [e.to_dict() for e in self.rag.explain(query, passage_ids, top)]

    def subgraph(self, query: str, top: int = 5, limit: int = 60) -> dict:
        """The graph around a query: ``{"nodes": [{"id", "label", "kind", "score"}], "edges": [{"source",
        "target", "kind"}]}``: the query, its seed entities, its top ``top`` passages and the walks between them
        (at most ``limit`` nodes)."""
        query = _texts([query], "query")[0]
        top, limit = _positive(top, "top", MAX_TOP_K), _positive(limit, "limit", 1000)
        with self._read_lock:
            if self._empty():
                return {"nodes": [{"id": "query", "label": query, "kind": "query", "score": None}], "edges": []}
            sol = self.rag.retrieve([query], top, explain=True)[0]
        texts = dict(zip(sol.passage_ids, sol.docs, strict=False))
        return results.subgraph(query, sol.explanations, texts, limit)

    def stats(self) -> dict:
        """Graph counts, documents by status, the extractor, the storage and the index version."""
        from hippo_engine import __version__
        with self._read_lock:
            state = self.rag.index_state
            state.refresh()         # another writer (this memory's worker, another process) may have moved it on
            graph = self.rag.graph_stats() if len(state) else {}
            out = {"graph": graph, "documents": self.store.counts(),
                   "extractor": state.extractor or self.rag.config.extractor,
                   "storage": {"backend": self.store.name, "location": state.db.shown_location},
                   "index_version": state.version, "version": __version__}
        out["worker"] = {"running": self.ingestor.running, "batch_size": self.ingestor.batch_size}
        out["batching"] = self.batches.stats()
        return out

    # ------------------------------------------------------------------ lifecycle
    def _check_open(self) -> None:
        if self._closed:
            raise KeyError("this workspace was closed (deleted) while the request ran")

    @property
    def idle(self) -> bool:
        """Whether the queue has nothing to do here (nothing pending or being indexed as far as this
        memory's worker knows): closing the memory then loses no work."""
        return self.ingestor.idle

    def close(self) -> None:
        """Stop the worker (after its batch), close the job store and the index(es). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.ingestor.stop()
        self.store.close()
        with self._write_lock:
            if self.writer is not self.rag:
                self.writer.close()
        with self._read_lock:
            self.rag.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["MAX_PAGE", "MAX_TOP_K", "Memory"]
