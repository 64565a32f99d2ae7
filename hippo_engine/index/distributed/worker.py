"""What a Ray worker runs: the callable classes that Ray Data's ``map_batches`` turns into actors.

* :class:`SplitWorker`: documents -> their passages (:func:`~hippo_engine.index.chunking.document_chunks`,
  the encoder's tokenizer loaded only when a document is longer than ``chunk_size``).
* :class:`ExtractEncodeWorker`: new passages -> their facts (spaCy for ``extractor="ner"``, the LLM
  extractors against an OpenAI-compatible server for ``openie``/``nary``) and the vectors of the passage,
  of its facts and of its entities, with the engine's own encoder.

Both load their models once per actor (Ray Data keeps an actor per worker slot) and make them from
names and the configuration, never from pickled model objects. Nothing here writes to the index:
the driver's single writer commits what these return (:mod:`.committer`).

Every text a worker encodes comes back with its vector; an entity or fact shared by several batches
is encoded by the batch that claims it first (:class:`Claims`, an actor on the driver's node), so each
distinct text is encoded about once across the cluster. The encoder gives a text the same vector
whatever else is in its batch (:class:`~hippo_engine.models.encoder.TransformersEncoder`), which is
why the index equals one built in a single process.

Rows out of :class:`ExtractEncodeWorker` (one per passage; the batch's statistics on its first row):
``pid``, ``ok``, ``error``, ``facts`` (JSON: ``{"t": [[s, p, o], ...]}`` or ``{"h": [[text, [entity,
...]], ...]}``), ``entities`` and ``fact_texts`` (the normalised texts the passage's facts need
vectors for), ``texts`` and ``vectors`` (the texts this row carries vectors for, float32 bytes),
``llm`` (sent to an LLM), ``results`` (the LLM results file of the batch, JSON text), ``worker``,
``batch``, ``n``, ``busy_s``.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hippo_engine.datatypes import Extraction, Hyperedge
from hippo_engine.ids import document_id, mdhash_id

#: how long a worker waits for the claims actor before encoding everything itself
CLAIM_TIMEOUT_S = 30.0


class Claims:
    """Which batch encodes each entity and fact text: the first batch (``key``) that asks owns it;
    a batch asking again (a retry after its worker died) gets the same answer."""

    def __init__(self) -> None:
        self.owner: dict[str, str] = {}

    def claim(self, key: str, hashes: Sequence[str]) -> list[bool]:
        """For each text hash, whether ``key`` owns it (now or since an earlier call)."""
        return [self.owner.setdefault(h, key) == key for h in hashes]

    def size(self) -> int:
        return len(self.owner)


def _config(values: Mapping[str, Any]):
    from hippo_engine.config import HippoConfig
    return HippoConfig(**dict(values))


def _worker_name() -> str:
    """``<node id prefix>:<pid>``: a worker process, for the per-worker rates."""
    try:
        import ray
        node = ray.get_runtime_context().get_node_id()[:8]
    except Exception:   # noqa: BLE001 - outside Ray (unit use)
        node = "local"
    return f"{node}:{os.getpid()}"


def _as_list(column) -> list:
    """A Ray Data batch column (numpy array or list) as a Python list."""
    return column.tolist() if hasattr(column, "tolist") else list(column)


class _Models:
    """The worker's models, made on first use from names and the configuration."""

    def __init__(self, config: Mapping[str, Any], llm_name: str, embedding_name: str, threads: int):
        cfg = _config(config).replace(show_progress=False, embedding_num_workers=max(1, threads))
        self.cache = Path(tempfile.gettempdir()) / f"hippo-ray-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        from hippo_engine.llm.providers import Models
        self.models = Models(cfg, self.cache, llm_name, embedding_name)
        self.config = cfg

    def folder(self) -> Path:
        """The worker's folder (the LLM cache, batches' results files): made when first needed, removed
        when the worker ends normally (a killed worker leaves it in the temp folder)."""
        if not self.cache.exists():
            self.cache.mkdir(parents=True)
            weakref.finalize(self, shutil.rmtree, self.cache, True)
        return self.cache

    def encoder(self):
        return self.models.encoder()

    def llm(self):
        self.folder()
        return self.models.llm()


class SplitWorker:
    """Documents -> passages. Input rows ``pos``, ``text``, ``id`` ('' when derived); output rows
    ``pos``, ``doc_id``, ``passages`` (the document's passage texts in order)."""

    def __init__(self, config: Mapping[str, Any], llm_name: str, embedding_name: str, threads: int = 1):
        self._models = _Models(config, llm_name, embedding_name, threads)
        self._tokenizer = None

    def _tokenizer_for(self, text: str):
        size = self._models.config.chunk_size
        if size is None or len(text.encode("utf-8", "surrogatepass")) <= size:
            return None
        if self._tokenizer is None:
            self._tokenizer = getattr(self._models.encoder(), "tokenizer", None)
        return self._tokenizer

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, list]:
        from hippo_engine.index.chunking import document_chunks
        cfg = self._models.config
        out: dict[str, list] = {"pos": [], "doc_id": [], "passages": []}
        for pos, text, given in zip(_as_list(batch["pos"]), _as_list(batch["text"]), _as_list(batch["id"]),
                                    strict=True):
            chunks = document_chunks(text, cfg.chunk_size, cfg.chunk_overlap, self._tokenizer_for(text))
            out["pos"].append(int(pos))
            out["doc_id"].append(given or document_id(text))
            out["passages"].append(list(chunks))
        return out


class _Empty:
    """A store that holds nothing (``new_texts`` then lists every entity and fact)."""

    def __contains__(self, key: object) -> bool:
        return False


def facts_json(ex: Extraction, pid: str) -> str:
    """One passage's facts of an ``Extraction`` as the rows carry them (see :func:`read_facts`)."""
    if ex.triples is not None and pid in ex.triples:
        return json.dumps({"t": [list(t) for t in ex.triples[pid]]}, ensure_ascii=False)
    hs = (ex.hyperedges or {})[pid]
    return json.dumps({"h": [[h.text, list(h.entities)] for h in hs]}, ensure_ascii=False)


def read_facts(text: str) -> tuple[list | None, list[Hyperedge] | None]:
    """A row's ``facts`` JSON as (triples, hyperedges), one of them None."""
    data = json.loads(text)
    if "t" in data:
        return [tuple(t) for t in data["t"]], None
    return None, [Hyperedge(h[0], tuple(h[1])) for h in data["h"]]


class ExtractEncodeWorker:
    """New passages -> facts and vectors. Input rows ``pid``, ``text``, ``known`` (facts JSON of a
    passage whose LLM results the driver already holds, else ''); output rows: see the module."""

    def __init__(self, config: Mapping[str, Any], llm_name: str, embedding_name: str, extractor: str,
                 claims=None, threads: int = 1):
        from hippo_engine.index.ner import NERExtractor
        self._models = _Models(config, llm_name, embedding_name, threads)
        self.kind, self.claims, self.llm_name = extractor, claims, llm_name
        self._ner: Any = None
        self._models.encoder()                     # loaded here, so a batch's busy time is its work
        if extractor == "ner":
            self._ner = NERExtractor()     # quiet: no bars on the workers
            self._ner.pipeline()

    # ------------------------------------------------------------------ extraction
    def _extract(self, passages: dict[str, str]) -> tuple[Extraction, str]:
        """Facts of ``passages`` and, for the LLM extractors, the batch's results file (JSON text)."""
        from hippo_engine.index.extractors import make_extractor
        if not passages:
            return Extraction(triples={}, hyperedges={}), ""
        if self.kind == "ner":
            ex = make_extractor("ner", self._models.cache, self.llm_name, self._models.llm, max_new_tokens=0,
                                ner=self._ner)
            return ex.extract(passages), ""
        folder = Path(tempfile.mkdtemp(dir=self._models.folder()))    # this batch's results file only
        try:
            cfg = self._models.config
            ex = make_extractor(self.kind, folder, self.llm_name, self._models.llm,
                                max_new_tokens=cfg.max_new_tokens)
            got = ex.extract(passages)
            path = getattr(ex, "path", None)
            return got, (Path(path).read_text(encoding="utf-8") if path and Path(path).exists() else "")
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # ------------------------------------------------------------------ encoding
    def _texts_of(self, triples, hyperedges) -> tuple[list[str], list[str], bool]:
        """The normalised entity phrases and fact texts of one passage's facts (as the writer sees them),
        and whether it keeps a hyperedge (then ``passage_vectors="sentence_mean"`` needs no passage vector)."""
        from hippo_engine.index.encoding import new_texts
        from hippo_engine.index.facts import normalize_hyperedges, normalize_triples
        mode = self._models.config.normalization
        norm = {"p": normalize_triples(triples or (), mode)}
        hyper = {"p": normalize_hyperedges(hyperedges or (), mode)}
        ents, facts = new_texts({"entity": _Empty(), "fact": _Empty()}, norm, hyper)  # type: ignore[dict-item]
        return list(ents.values()), list(facts.values()), bool(hyper["p"])

    def _owned(self, key: str, texts: list[str]) -> set[str]:
        """Those of ``texts`` this batch encodes (all of them when the claims actor cannot answer)."""
        if self.claims is None or not texts:
            return set(texts)
        try:
            import ray
            mine = ray.get(self.claims.claim.remote(key, [mdhash_id(t) for t in texts]), timeout=CLAIM_TIMEOUT_S)
        except Exception:   # noqa: BLE001 - a lost claims actor costs duplicate encodings, never vectors
            return set(texts)
        return {t for t, m in zip(texts, mine, strict=True) if m}

    # ------------------------------------------------------------------ a batch
    def __call__(self, batch: Mapping[str, Any]) -> dict[str, list]:
        t0 = time.perf_counter()
        pids, texts, known = _as_list(batch["pid"]), _as_list(batch["text"]), _as_list(batch["known"])
        todo = {p: t for p, t, k in zip(pids, texts, known, strict=True) if not k}
        ex, results = self._extract(todo)
        facts: dict[str, str] = {p: k for p, k in zip(pids, known, strict=True) if k}
        facts.update({p: facts_json(ex, p) for p in todo if p in ex.passages})
        need = {p: self._texts_of(*read_facts(facts[p])) for p in facts}
        key = f"{pids[0]}+{len(pids)}"
        claimed = self._owned(key, list(dict.fromkeys(t for p in need for part in need[p][:2] for t in part)))
        mean = self._models.config.passage_vectors == "sentence_mean"
        carried: dict[str, list[str]] = {}
        for p, text in zip(pids, texts, strict=True):
            own = [] if p not in facts or (mean and need[p][2]) else [text]
            own += [t for part in need.get(p, ((), ()))[:2] for t in part if t in claimed]
            claimed.difference_update(own)          # each text travels once, with its first passage
            carried[p] = list(dict.fromkeys(own))
        every = list(dict.fromkeys(t for p in pids for t in carried[p]))
        vecs = self._models.encoder().encode(every) if every else np.zeros((0, 0), np.float32)
        row = {t: i for i, t in enumerate(every)}
        busy = time.perf_counter() - t0
        out: dict[str, list] = {c: [] for c in ("pid", "ok", "error", "facts", "entities", "fact_texts", "texts",
                                                "vectors", "llm", "results", "worker", "batch", "n", "busy_s")}
        worker = _worker_name()
        for i, p in enumerate(pids):
            ent, fts = need[p][:2] if p in need else ([], [])
            v = np.ascontiguousarray(vecs[[row[t] for t in carried[p]]], np.float32) if carried[p] else None
            out["pid"].append(p)
            out["ok"].append(p in facts)
            out["error"].append(ex.failed.get(p, "") if p not in facts else "")
            out["facts"].append(facts.get(p, ""))
            out["entities"].append(ent)
            out["fact_texts"].append(fts)
            out["texts"].append(carried[p])
            out["vectors"].append(v.tobytes() if v is not None else b"")
            out["llm"].append(p in todo and self.kind != "ner")
            out["results"].append(results if i == 0 else "")
            out["worker"].append(worker)
            out["batch"].append(key)
            out["n"].append(len(pids) if i == 0 else 0)
            out["busy_s"].append(busy if i == 0 else 0.0)
        return out


__all__ = ["Claims", "ExtractEncodeWorker", "SplitWorker", "facts_json", "read_facts"]
