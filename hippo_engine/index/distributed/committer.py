"""The driver's single writer: commits the workers' results into the index as they arrive.

The workers (:mod:`.worker`) return, per new passage, its facts and the vectors of the texts it
carries. :class:`Committer` collects them and, whenever documents are complete, commits them with
the engine's own single-process code: :func:`~hippo_engine.index.documents.index_documents` over
those documents, under the writer lock, in one transaction per commit. Only two things differ from
a single-process ``index()``: the extractor answers from the workers' facts
(:class:`PrecomputedExtractor`) and the encoder from their vectors (:class:`PrecomputedEncoder`),
so the stores, graph and synonymy are what the single process would write.

A document is complete when each of its passages is stored or has arrived, and every entity and
fact text its passages need has a vector here or is stored (a text is encoded by the batch that
claimed it first, which may arrive later). Documents that replace stored ones (their old passages
may be removed) wait for the last commit, so that a passage another document of the call still
holds is never removed in between. A passage whose extraction failed keeps its documents out (as
in a single process: ``OpenIEError`` at the end names them; a rerun retries them). A rerun after a
crash skips what is committed: its passages are stored.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from hippo_engine.datatypes import Extraction, Hyperedge, Triple
from hippo_engine.ids import entity_id, fact_id
from hippo_engine.index.distributed.worker import read_facts
from hippo_engine.index.documents import DocumentBatch, index_documents
from hippo_engine.models.encoder import Encoder

logger = logging.getLogger(__name__)


class PrecomputedEncoder(Encoder):
    """Vectors the workers computed, by text. A text without one is encoded by ``fallback`` (the
    engine's encoder, made on first use), counted in :attr:`fallbacks`."""

    def __init__(self, name: str, fallback: Callable[[], Encoder]):
        self.name = name
        self._fallback = fallback
        self.vectors: dict[str, np.ndarray] = {}
        self.served: set[str] = set()
        self.fallbacks = 0
        self._dim: int | None = None

    @property
    def dim(self) -> int:   # type: ignore[override]
        return self._dim if self._dim is not None else self._fallback().dim

    def add(self, texts: Sequence[str], data: bytes) -> None:
        """The vectors of ``texts`` (float32 rows, in order) from a worker."""
        if not texts:
            return
        mat = np.frombuffer(data, dtype=np.float32)
        if mat.size % len(texts):
            raise ValueError(f"a worker sent {mat.size} floats for {len(texts)} texts")
        mat = mat.reshape(len(texts), -1)
        self._dim = mat.shape[1]
        for t, v in zip(texts, mat, strict=True):
            self.vectors.setdefault(t, v)

    def encode(self, texts: Sequence[str], *, instruction: str | None = None, show_progress: bool = False,
               desc: str = "Encoding") -> np.ndarray:
        texts = list(texts)
        if instruction is not None:
            return self._fallback().encode(texts, instruction=instruction, show_progress=show_progress, desc=desc)
        missing = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if missing:
            self.fallbacks += len(missing)
            logger.info("encoding %d text(s) without a worker's vector in the driver", len(missing))
            for t, v in zip(missing, self._fallback().encode(missing, desc=desc), strict=True):
                self.vectors[t] = v
        self.served.update(texts)
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.vectors[t] for t in texts]).astype(np.float32, copy=False)

    def forget_served(self) -> None:
        """Drop the vectors written by the last commit (they are stored now)."""
        for t in self.served:
            self.vectors.pop(t, None)
        self.served.clear()


class PrecomputedExtractor:
    """The workers' facts, as an extractor for :func:`index_documents` (named like the real one)."""

    def __init__(self, name: str):
        self.name = name
        self.triples: dict[str, list[Triple]] = {}
        self.hyperedges: dict[str, list[Hyperedge]] = {}

    def add(self, pid: str, facts_json: str) -> None:
        triples, hyper = read_facts(facts_json)
        if triples is not None:
            self.triples[pid] = triples
        else:
            self.hyperedges[pid] = hyper or []

    def extract(self, passages: Mapping[str, str]) -> Extraction:
        t = {p: self.triples[p] for p in passages if p in self.triples}
        h = {p: self.hyperedges[p] for p in passages if p in self.hyperedges}
        failed = {p: "no facts came back from the workers" for p in passages if p not in t and p not in h}
        return Extraction(triples=t or None, hyperedges=h or None, failed=failed)


class _SearchLater:
    """A store whose search index (PostgreSQL's HNSW) is built after the call's last commit, over every
    row at once, as a single-process ``index()`` builds it after its one commit (rows added to a
    built HNSW index one commit at a time cost far more); everything else goes to ``store``."""

    def __init__(self, store, asked: list):
        self._store, self._asked = store, asked

    def prepare_search(self) -> bool:
        self._asked.append(True)
        return False

    def __contains__(self, key: object) -> bool:
        return key in self._store

    def __len__(self) -> int:
        return len(self._store)

    def __getattr__(self, name: str):
        return getattr(self._store, name)


class _WritingView:
    """The index state with another encoder (what the writer encodes comes from ``encoder``) and its
    search indexes built after the last commit (:class:`_SearchLater`)."""

    def __init__(self, state, encoder: Encoder):
        self._state, self.encoder = state, encoder
        self.search_asked: list = []

    @property
    def stores(self) -> dict:
        return {ns: _SearchLater(s, self.search_asked) for ns, s in self._state.stores.items()}

    def __getattr__(self, name: str):
        return getattr(self._state, name)


@dataclass
class CommitStats:
    """One commit: documents, new passages, seconds."""

    documents: int
    passages: int
    seconds: float


@dataclass
class _Arrived:
    entities: list[str]
    facts: list[str]


@dataclass
class Committer:
    """Commits complete documents of ``batch`` (its new passages: ``new``) into ``rag``'s index."""

    rag: object
    batch: DocumentBatch
    new: Mapping[str, str]
    extractor: str
    deferred: set[str] = field(default_factory=set)
    encoder: PrecomputedEncoder = field(init=False)
    facts: PrecomputedExtractor = field(init=False)

    def __post_init__(self) -> None:
        rag = self.rag
        self.state = rag.index_state      # type: ignore[attr-defined]
        self.encoder = PrecomputedEncoder(rag.embedding_model_name, lambda: rag.encoder)  # type: ignore[attr-defined]
        self.facts = PrecomputedExtractor(self.extractor)
        self.view = _WritingView(self.state, self.encoder)
        self.waiting: dict[str, list[str]] = dict(self.batch.documents)
        self.arrived: dict[str, _Arrived] = {}
        self.complete: set[str] = set()      # arrived passages whose texts all have vectors or are stored
        self.failed: dict[str, str] = {}
        self.duplicates = 0
        self.llm_passages = 0
        self.commits: list[CommitStats] = []
        self.reports: list[dict] = []
        self.workers: dict[str, dict] = {}
        self.search_s = 0.0
        self.fresh = len(self.state.stores["fact"]) == 0 and len(self.state.stores["entity"]) == 0

    # ------------------------------------------------------------------ arrivals
    def arrive(self, rows: Iterable[Mapping]) -> None:
        """Take a worker's rows (see :mod:`.worker`); a passage seen before (a retried batch) is ignored."""
        for r in rows:
            pid = r["pid"]
            if pid in self.arrived or pid in self.failed or pid not in self.new:
                self.duplicates += 1
                continue
            if r["n"]:
                w = self.workers.setdefault(r["worker"], {"batches": 0, "passages": 0, "busy_s": 0.0})
                w["batches"] += 1
                w["passages"] += int(r["n"])
                w["busy_s"] += float(r["busy_s"])
            self.encoder.add(list(r["texts"]), r["vectors"])
            self.llm_passages += bool(r["llm"])
            if not r["ok"]:
                self.failed[pid] = r["error"] or "fact extraction failed"
                continue
            self.facts.add(pid, r["facts"])
            self.arrived[pid] = _Arrived(list(r["entities"]), list(r["fact_texts"]))

    def _check_vectors(self) -> None:
        """Mark complete the arrived passages whose entity and fact texts all have a vector here or
        are stored (the stores asked once for all of them)."""
        vec = self.encoder.vectors
        todo = [p for p in self.arrived if p not in self.complete]
        ents = {entity_id(t) for p in todo for t in self.arrived[p].entities if t not in vec}
        facts = {fact_id(t) for p in todo for t in self.arrived[p].facts if t not in vec}
        stores = self.state.stores
        have_e = stores["entity"].existing(ents) if ents else set()
        have_f = stores["fact"].existing(facts) if facts else set()
        for p in todo:
            a = self.arrived[p]
            if all(t in vec or entity_id(t) in have_e for t in a.entities) and \
                    all(t in vec or fact_id(t) in have_f for t in a.facts):
                self.complete.add(p)

    def _ready(self, doc: str, final: bool) -> bool | None:
        """True: commit now; False: wait; None: never (a passage failed or never came back)."""
        for p in self.waiting[doc]:
            if p not in self.new:
                continue
            if p in self.failed:
                return None
            if p not in self.arrived:
                return None if final else False
            if not final and p not in self.complete:
                return False
        return final or doc not in self.deferred

    # ------------------------------------------------------------------ commits
    def commit_ready(self, final: bool = False) -> int:
        """Commit the complete documents (``final``: all that can be; the deferred ones too). Returns
        how many documents were committed."""
        ready, dropped = [], []
        if not final:
            self._check_vectors()
        for d in self.waiting:
            r = self._ready(d, final)
            if r:
                ready.append(d)
            elif r is None and final:
                dropped.append(d)
        for d in dropped:
            del self.waiting[d]
        if not ready:
            return 0
        self._commit(ready)
        return len(ready)

    def _commit(self, docs: list[str]) -> None:
        b = self.batch
        t0 = time.perf_counter()
        pids = list(dict.fromkeys(p for d in docs for p in b.documents[d]))
        meta = {d: b.metadata[d] for d in docs if d in b.metadata} if b.metadata is not None else None
        part = DocumentBatch(passages={p: b.passages[p] for p in pids}, documents={d: b.documents[d] for d in docs},
                             positions={d: b.positions[d] for d in docs if d in b.positions}, metadata=meta)
        report = index_documents(self.view, self.facts, part, getattr(self.rag, "llm_model_name", ""))
        self.encoder.forget_served()
        for d in docs:
            del self.waiting[d]
        self.reports.append(report)
        self.commits.append(CommitStats(len(docs), sum(p in self.new for p in pids), time.perf_counter() - t0))

    def worker_rates(self) -> dict[str, dict]:
        """Per worker process: batches, passages, busy seconds and passages per busy second."""
        return {w: {**v, "busy_s": round(v["busy_s"], 3),
                    "passages_per_s": round(v["passages"] / v["busy_s"], 2) if v["busy_s"] else None}
                for w, v in sorted(self.workers.items())}

    def build_search(self) -> None:
        """Build the search indexes the commits left for the end (under the writer lock), as the
        writer would have after a single commit. PostgreSQL's HNSW index depends on the order of the
        table's rows: when this call filled empty tables, their rows are first put in id order
        (``CLUSTER``), the order one commit writes them in, so the index is the single process's."""
        if not self.view.search_asked:
            return
        from hippo_engine.index.writer import IndexWriter
        t0 = time.perf_counter()
        cfg = self.state.config
        with self.state.lock.held():
            if self.fresh and cfg.storage_backend == "postgres" and cfg.postgres_search == "hnsw":
                for ns in ("entity", "fact"):
                    _rows_in_id_order(self.state.stores[ns])
            IndexWriter(self.state)._prepare_search(self.extractor)
        self.search_s = time.perf_counter() - t0

    @property
    def lost(self) -> list[str]:
        """New passages that neither arrived nor failed (none, unless results were lost)."""
        return [p for p in self.new if p not in self.arrived and p not in self.failed]


def _rows_in_id_order(store) -> None:
    """Rewrite a PostgreSQL vector table in primary-key (id) order (before its HNSW index is built)."""
    with store.db.ddl() as c:
        pk = c.execute("SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'p'",
                       (store.table,)).fetchone()[0]
        c.execute(f'CLUSTER {store.table} USING "{pk}"')


def merge_reports(reports: Sequence[dict]) -> dict:
    """One ``index()`` report from the commits' reports: counts added up, document lists joined,
    stage timings added up."""
    out: dict = {"added": 0}
    docs: dict = {}
    timings: dict[str, float] = {}
    for r in reports:
        for k, v in r.items():
            if k == "documents":
                for dk, dv in v.items():
                    if isinstance(dv, list):
                        docs.setdefault(dk, []).extend(dv)
                    else:
                        docs[dk] = docs.get(dk, 0) + dv
            elif k == "timings":
                for tk, tv in v.items():
                    timings[tk] = timings.get(tk, 0.0) + tv
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
    if docs:
        out["documents"] = docs
    if timings:
        out["timings"] = timings
    return out


__all__ = ["CommitStats", "Committer", "PrecomputedEncoder", "PrecomputedExtractor", "merge_reports"]
