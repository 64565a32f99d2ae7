"""``RayExecutor``: ``HippoRAG.index`` with its work spread over a Ray cluster (the ``ray`` extra).

    rag = HippoRAG("memory", storage="postgres", executor=RayExecutor("10.0.0.5:6379"))
    rag.index(docs)                      # or: hippo-engine index corpus.json --save-dir memory --ray 10.0.0.5:6379

Two Ray Data jobs run on the cluster's workers, each as ``map_batches`` over an actor per worker slot
(:mod:`.worker`): splitting the documents into passages, then, for the passages the index does not
hold, fact extraction (spaCy; or an LLM extractor against the OpenAI-compatible server of the
configuration) and the encodings of passages, facts (sentences) and entities. This process is the
only writer: it validates the input, receives the second job's results as they stream in and
commits complete documents batch after batch under the writer lock (:mod:`.committer`). The index
is the one a single-process ``index()`` of the same documents builds; a worker that dies mid-batch
is restarted by Ray and its batch run again (a passage is never taken twice); a call interrupted
between commits leaves the committed documents, and calling it again does the rest.

Without an address, Ray is joined at ``RAY_ADDRESS`` when that is set, otherwise started on this
machine with every process bound to 127.0.0.1 and no dashboard. The workers need the
engine installed (``pip install 'hippo-engine[ray]'``) and load the models by name: the embedding
model, spaCy's pipeline and, for LLM extraction, the server of ``llm_base_url``.
"""
from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

from hippo_engine.errors import ConfigError
from hippo_engine.index.distributed.committer import Committer, merge_reports
from hippo_engine.index.distributed.worker import Claims, ExtractEncodeWorker, SplitWorker
from hippo_engine.index.documents import DocumentBatch, check_batch, check_passage_lengths, index_documents
from hippo_engine.progress import Progress, announce

logger = logging.getLogger(__name__)

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def use_loopback() -> None:
    """Make Ray take 127.0.0.1 as this node's address (it otherwise swaps a loopback address for the
    machine's outward one): set before Ray is imported, and on Ray's constant if it already is."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import sys
    consts = sys.modules.get("ray._private.ray_constants")
    if consts is not None:
        setattr(consts, "ENABLE_RAY_CLUSTER", False)    # noqa: B010 - read when Ray resolves a node address


class RayExecutor:
    """Runs ``index()``'s splitting, extraction and encoding on a Ray cluster (see the module).

    ``address``: the cluster (``host:port``; None: ``RAY_ADDRESS`` or a local Ray on 127.0.0.1);
    ``workers``: actors per job (default: the cluster's CPUs / ``cpus_per_worker``); ``batch_size``:
    passages per worker batch; ``cpus_per_worker``: CPUs each actor reserves (its encoder threads).
    After a call, :attr:`stats` holds the per-worker rates and the writer's commits."""

    def __init__(self, address: str | None = None, *, workers: int | None = None, batch_size: int = 64,
                 cpus_per_worker: float = 1.0, split_batch_size: int = 256):
        if batch_size <= 0 or split_batch_size <= 0 or cpus_per_worker <= 0:
            raise ValueError("RayExecutor: batch_size, split_batch_size and cpus_per_worker must be positive")
        if workers is not None and workers <= 0:
            raise ValueError(f"RayExecutor: workers must be at least 1, got {workers}")
        self.address, self.workers, self.batch_size = address, workers, batch_size
        self.cpus_per_worker, self.split_batch_size = cpus_per_worker, split_batch_size
        self.started_ray = False
        self.stats: dict = {}

    # ------------------------------------------------------------------ the cluster
    def connect(self):
        """Join (or start) Ray; returns the ``ray`` module."""
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        if address is None or address.rsplit(":", 1)[0].strip("[]") in LOOPBACK:
            use_loopback()
        try:
            import ray
        except ImportError:
            raise RuntimeError("indexing on Ray needs the ray extra: pip install 'hippo-engine[ray]'") from None
        if not ray.is_initialized():
            if address is None:
                ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, logging_level=logging.WARNING,
                         log_to_driver=True)
                self.started_ray = True
            else:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True)
        return ray

    def close(self) -> None:
        """Leave Ray (stops it when this executor started it)."""
        if self.started_ray:
            import ray
            ray.shutdown()
            self.started_ray = False

    def _slots(self, ray) -> int:
        if self.workers is not None:
            return self.workers
        cpus = float(ray.cluster_resources().get("CPU", 0))
        return max(1, int(cpus // self.cpus_per_worker))

    # ------------------------------------------------------------------ index()
    def index(self, rag, docs: Sequence[str], ids: Sequence[str] | None = None,
              metadata: Sequence[dict | None] | None = None) -> dict:
        """``rag.index(docs, ids, metadata)`` with the work on the cluster (same report, plus ``ray``)."""
        t0 = time.perf_counter()
        if rag.config.sentence_vectors != "encode":     # the workers encode each text alone
            raise ConfigError('sentence_vectors="pooled" is not available on the Ray executor: its workers encode '
                              'every sentence alone; index in one process or use sentence_vectors="encode"')
        batch, metas = self._prepare(rag, docs, ids, metadata)
        ray = self.connect()
        self._quiet_progress(ray, Progress.of(rag.config))
        args = (rag.config.to_dict(), rag.llm_model_name, rag.embedding_model_name)
        split_s = time.perf_counter()
        self._split(ray, batch, docs, ids, metas, args)
        split_s = time.perf_counter() - split_s
        state = rag.index_state
        if not batch.documents:
            logger.warning("index(): nothing to index")
            return {"added": 0}
        new = {k: v for k, v in batch.passages.items() if not state.db.has_passage(k)}
        if not new:
            return index_documents(state, rag.extractor, batch, rag.llm_model_name)
        state.check_extractor(rag.extractor.name)
        check_passage_lengths(rag.extractor, new, batch)
        deferred = set(state.documents.document_plan(batch.documents).replaced)
        committer = Committer(rag, batch, new, rag.extractor.name, deferred)
        announce(f"indexing {len(new)} new passage(s) on Ray: {self._slots(ray)} worker(s), batches of "
                 f"{self.batch_size}")
        work_s = time.perf_counter()
        stream_error = self._run(ray, rag, new, committer, args)
        committer.commit_ready(final=True)
        committer.build_search()
        work_s = time.perf_counter() - work_s
        report = merge_reports(committer.reports)
        self.stats = _stats(committer, split_s, work_s, time.perf_counter() - t0, self._slots(ray))
        self.stats["node_ip"] = ray.util.get_node_ip_address()     # this (the driver's) node's address
        report["ray"] = self.stats
        report["openie_llm_passages"] = committer.llm_passages
        if stream_error is not None:
            raise RuntimeError(f"indexing on Ray stopped: {stream_error}; the {self.stats['committed_passages']} "
                               f"passage(s) committed stay, run index() again for the rest") from stream_error
        _check_complete(committer, rag.extractor.name, len(new))
        return report

    def _prepare(self, rag, docs, ids, metadata) -> tuple[DocumentBatch, list | None]:
        """Validate the call like a single-process ``index()`` does, before any work."""
        from hippo_engine.store.registry import get_backend
        no_nul = not get_backend(rag.config.storage_backend).accepts_nul
        _, metas = check_batch(docs, ids, "index", no_nul=no_nul, metadata=metadata)
        batch = DocumentBatch(metadata={} if metas is not None else None)
        batch.skipped = [i for i, d in enumerate(docs) if not d.strip()]
        return batch, metas

    def _split(self, ray, batch: DocumentBatch, docs, ids, metas, args) -> None:
        """Split on the cluster; the rows come back in input order into ``batch`` (documents given
        twice without ids collapse into one, as in :func:`~hippo_engine.index.documents.split_documents`)."""
        skipped = set(batch.skipped)
        items = [{"pos": i, "text": d, "id": ids[i] if ids is not None else ""} for i, d in enumerate(docs)
                 if i not in skipped]
        if batch.skipped:
            logger.warning("index(): skipping %d empty or whitespace-only document(s) at positions %s",
                           len(batch.skipped), batch.skipped[:10])
        if not items:
            return
        ds = ray.data.from_items(items).map_batches(
            SplitWorker, fn_constructor_args=(*args, 1), batch_size=self.split_batch_size,
            compute=ray.data.ActorPoolStrategy(size=min(self._slots(ray), -(-len(items) // self.split_batch_size))),
            num_cpus=self.cpus_per_worker, batch_format="numpy")
        rows = sorted(ds.take_all(), key=lambda r: int(r["pos"]))
        _assemble(batch, rows, metas)

    def _run(self, ray, rag, new: dict[str, str], committer: Committer, args) -> BaseException | None:
        """The extraction and encoding job, its results committed as they arrive. Returns the error
        that stopped the stream (None: it ran to the end)."""
        known = _known_facts(rag.extractor, new)
        claims = ray.remote(num_cpus=0)(Claims).options(scheduling_strategy=_here(ray)).remote()
        items = [{"pid": p, "text": t, "known": known.get(p, "")} for p, t in new.items()]
        threads = max(1, int(self.cpus_per_worker))
        ds = ray.data.from_items(items).map_batches(
            ExtractEncodeWorker, fn_constructor_args=(*args, rag.extractor.name, claims, threads),
            batch_size=self.batch_size,
            compute=ray.data.ActorPoolStrategy(size=min(self._slots(ray), -(-len(items) // self.batch_size)),
                                               max_tasks_in_flight_per_actor=1),   # a batch goes to a free worker
            num_cpus=self.cpus_per_worker, batch_format="numpy")
        merge = _results_merger(rag.extractor)
        stream = _Stream(ds)
        try:
            while True:
                try:
                    rows = stream.next()
                except StopIteration:
                    return None
                except Exception as e:   # noqa: BLE001 - the job failed: what is committed stays
                    return e
                merge(rows)
                committer.arrive(rows)
                committer.commit_ready()      # a failed commit raises (the job is stopped below)
        finally:
            stream.close()
            ray.kill(claims)

    @staticmethod
    def _quiet_progress(ray, progress: Progress) -> None:
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = progress.show
        ctx.print_on_execution_start = False


def _assemble(batch: DocumentBatch, rows: list[dict], metas: list | None) -> None:
    """The split rows (in input order) as ``batch``'s documents and passages."""
    from hippo_engine.ids import chunk_id
    for r in rows:
        pos, doc_id = int(r["pos"]), str(r["doc_id"])
        batch.take_metadata(doc_id, metas[pos] if metas is not None else None, pos, "index")
        if doc_id in batch.documents:
            continue
        pids = []
        for text in list(r["passages"]):
            pid = chunk_id(str(text))
            batch.passages.setdefault(pid, str(text))
            pids.append(pid)
        batch.documents[doc_id] = list(dict.fromkeys(pids))
        batch.positions[doc_id] = pos


def _known_facts(extractor, new: dict[str, str]) -> dict[str, str]:
    """Facts JSON of the new passages an LLM extractor's results file already holds (no LLM call)."""
    from hippo_engine.index.distributed.worker import facts_json
    results = getattr(extractor, "results", None)
    if not results:
        return {}
    have = {p: t for p, t in new.items() if p in results}
    if not have:
        return {}
    ex = extractor.extract(have)     # every one is in the file: no LLM call
    return {p: facts_json(ex, p) for p in have if p in ex.passages}


def _results_merger(extractor):
    """Adds the LLM results the workers send to the extractor's results file, saved as they come."""
    from hippo_engine.index.nary import load_nary_file
    from hippo_engine.index.openie import load_openie_file
    load = {"openie": load_openie_file, "nary": load_nary_file}.get(extractor.name)

    def merge(rows: list[dict]) -> None:
        texts = [r["results"] for r in rows if r["results"]]
        if load is None or not texts:
            return
        import tempfile
        from pathlib import Path
        for text in texts:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "results.json"
                path.write_text(text, encoding="utf-8")
                extractor.results.update(load(path))
        extractor.file.save()
    return merge


def _here(ray):
    """Scheduling on the driver's node (the claims actor lives beside the writer)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return NodeAffinitySchedulingStrategy(node_id=ray.get_runtime_context().get_node_id(), soft=True)


class _Stream:
    """The job's result rows as they arrive, read by a thread: :meth:`next` returns every row that
    arrived while the caller was busy (a slow commit takes the next ones together), raises
    ``StopIteration`` at the end and the job's error if it failed; :meth:`close` stops the job."""

    _END = object()

    def __init__(self, ds):
        self._q: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(ds,), name="hippo-ray-reader", daemon=True)
        self._held: Any = None
        self._thread.start()

    def _read(self, ds) -> None:
        try:
            for b in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
                if self._stop.is_set():
                    break                      # leaving the iterator shuts the job down
                self._q.put(b.to_pylist())
        except BaseException as e:   # noqa: BLE001 - handed to the consumer
            self._q.put(e)
        self._q.put(self._END)

    def next(self) -> list[dict]:
        rows: list[dict] = []
        item = self._held if self._held is not None else self._q.get()
        self._held = None
        while True:
            if item is self._END or isinstance(item, BaseException):
                if rows:                       # hand over what came first; the end or the error next time
                    self._held = item
                    return rows
                self._held = item              # stays the answer to every later call
                if isinstance(item, BaseException):
                    raise item
                raise StopIteration
            rows.extend(item)
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                return rows

    def close(self) -> None:
        self._stop.set()


def _stats(c: Committer, split_s: float, work_s: float, total_s: float, slots: int) -> dict:
    """Per-worker rates (passages per busy second), the writer's commits, the times."""
    commit_s = sum(x.seconds for x in c.commits)
    committed = sum(x.passages for x in c.commits)
    return {"workers": slots, "split_s": round(split_s, 3), "work_s": round(work_s, 3), "total_s": round(total_s, 3),
            "commits": len(c.commits), "committed_passages": committed, "commit_s": round(commit_s, 3),
            "search_index_s": round(c.search_s, 3),
            "commit_passages_per_s": round(committed / commit_s, 2) if commit_s else None,
            "duplicates_ignored": c.duplicates, "driver_encoded": c.encoder.fallbacks,
            "per_worker": c.worker_rates()}


def _check_complete(c: Committer, extractor: str, n_new: int) -> None:
    """Raise when a passage never came back or its extraction failed (after the others are committed)."""
    lost = c.lost
    if lost:
        raise RuntimeError(f"{len(lost)} of {n_new} new passage(s) never came back from the Ray workers (first: "
                           f"{lost[0]}); the others are committed: run index() again for these")
    if c.failed:
        from hippo_engine.index.openie import OpenIEError
        ok = n_new - len(c.failed)
        raise OpenIEError(f"{extractor} fact extraction failed for {len(c.failed)} of {n_new} new passage(s); the "
                          f"other {ok} were indexed. Run index() again to retry. First error: "
                          f"{next(iter(c.failed.values()))}", c.failed)


__all__ = ["RayExecutor", "use_loopback"]
