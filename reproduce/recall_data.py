"""Data and indexes of ``python -m reproduce recall-llm-free``: the datasets with and without passage titles,
in a shuffled corpus order, a caching encoder that encodes each text once across all of them, and the
``extractor="ner"`` index of each (built once under the work folder, then reused).

The single-relation sets (``2wiki_single``, its halves ``2wiki_single_first`` / ``2wiki_single_second``) are
generated from 2Wiki's evidence triples by :mod:`hippo_engine.evaluation.single_relation` (rule and seed there)
over the 2Wiki corpus: they share 2Wiki's corpus, its shuffle and so its index (:data:`INDEX_OF`).

Untitled data: every passage ``"title\\ntext"`` becomes ``text`` alone, and so does every gold passage (two
passages whose texts are equal merge into one, which the index would do anyway). Nothing else changes: the
questions, the gold sets and the corpus are those of the titled dataset.

The caching encoder keys a vector by (model, instruction, text) in one SQLite file; the encoder is
deterministic per text whatever its batch (see :mod:`hippo_engine.models.encoder`), so a cached vector is
the vector the model would give now. An index built through it equals one built without it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hippo_engine.models.encoder import Encoder

logger = logging.getLogger(__name__)

#: the corpus order of every run (``random.Random(SHUFFLE_SEED).shuffle``): recall must not depend on it
SHUFFLE_SEED = 12345
#: dataset name -> its folder under the data root
DATASETS = {"musique": "musique/hipporag_v1_train", "2wiki": "2wikimultihopqa", "2wiki_single": "2wikimultihopqa",
            "2wiki_single_first": "2wikimultihopqa", "2wiki_single_second": "2wikimultihopqa"}
#: the generated single-relation sets: name -> the half it keeps (``None``: both)
SINGLE = {"2wiki_single": None, "2wiki_single_first": "first", "2wiki_single_second": "second"}
#: a dataset whose corpus (and so index) is another's: name -> that dataset
INDEX_OF = dict.fromkeys(SINGLE, "2wiki")


def untitled(doc: str) -> str:
    """``"title\\ntext"`` -> ``text`` (a passage without a newline is returned as it is)."""
    return doc.split("\n", 1)[1] if "\n" in doc else doc


def load(name: str, titles: bool, data_root: Path, limit: int | None = None):
    """The dataset ``name`` (a key of :data:`DATASETS`) with its corpus shuffled, its first ``limit``
    questions, and, without ``titles``, every passage and gold passage stripped of its title line."""
    from hippo_engine.evaluation.datasets import load_dataset

    ds = load_dataset(data_root / DATASETS[name])
    if name in SINGLE:
        ds = single_relation(ds, name)
    ds = ds.head(limit)
    docs = list(ds.docs)
    random.Random(SHUFFLE_SEED).shuffle(docs)
    if ds.gold_docs is None:
        raise SystemExit(f"{name}: the questions have no gold passages")
    gold = ds.gold_docs
    if not titles:
        docs = list(dict.fromkeys(untitled(d) for d in docs))
        gold = [list(dict.fromkeys(untitled(g) for g in gs)) for gs in gold]
    return dataclasses.replace(ds, docs=docs, gold_docs=gold)


def single_relation(ds, name: str):
    """The single-relation set ``name`` (a key of :data:`SINGLE`) generated from the 2Wiki dataset ``ds``: its
    questions, gold passages (subject's page first, then the answer entities' pages) and answers; same corpus.
    A question's id is ``<half>:<subject title>|<relation>`` (``first`` / ``second``)."""
    from hippo_engine.evaluation.single_relation import build, gold_docs

    samples = json.loads(ds.path.read_text(encoding="utf-8"))
    items = [it for it in build(samples, ds.docs) if SINGLE[name] in (None, it.half)]
    return dataclasses.replace(ds, name=name, questions=[it.question for it in items],
                               gold_docs=gold_docs(items, ds.docs), gold_answers=[list(it.objects) for it in items],
                               question_ids=[f"{it.half}:{it.id}" for it in items], gold_match={})


def _folder(work: Path, name: str, titles: bool) -> Path:
    """The index folder of one variant (shared by datasets of one corpus, :data:`INDEX_OF`)."""
    return work / f"{INDEX_OF.get(name, name)}-{'titled' if titles else 'untitled'}-shuffle{SHUFFLE_SEED}"


class CachingEncoder(Encoder):
    """``inner`` with every vector kept in ``path`` (SQLite): texts already seen are not encoded again."""

    def __init__(self, inner: Encoder, path: Path):
        self.inner, self.name, self.dim = inner, inner.name, inner.dim
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS vec (k BLOB PRIMARY KEY, v BLOB NOT NULL)")
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self.encode_s = 0.0

    def encode_spans(self, texts: Sequence[str], spans: Sequence[tuple[int, int, int]]):
        """Texts with spans pooled from their forward passes (``sentence_vectors="pooled"``): the inner
        encoder's, not cached (a span's vector depends on its text)."""
        return self.inner.encode_spans(texts, spans)

    def _key(self, text: str, instruction: str | None) -> bytes:
        return hashlib.sha1(json.dumps([self.name, instruction, text]).encode("utf-8")).digest()

    def encode(self, texts: Sequence[str], *, instruction: str | None = None, show_progress: bool = False,
               desc: str = "Encoding") -> np.ndarray:
        texts = list(texts)
        keys = [self._key(t, instruction) for t in texts]
        out = np.zeros((len(texts), self.dim), np.float32)
        found: dict[bytes, np.ndarray] = {}
        with self._lock:
            for s in range(0, len(keys), 500):
                part = list(dict.fromkeys(keys[s:s + 500]))
                rows = self._db.execute(f"SELECT k, v FROM vec WHERE k IN ({','.join('?' * len(part))})", part)
                found.update((k, np.frombuffer(v, np.float32)) for k, v in rows)
        todo = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in found))
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        if todo:
            t0 = time.perf_counter()
            vecs = self.inner.encode(todo, instruction=instruction, show_progress=show_progress, desc=desc)
            self.encode_s += time.perf_counter() - t0
            new = {self._key(t, instruction): np.asarray(v, np.float32) for t, v in zip(todo, vecs, strict=True)}
            with self._lock:
                self._db.executemany("INSERT OR REPLACE INTO vec VALUES (?, ?)",
                                     [(k, v.tobytes()) for k, v in new.items()])
                self._db.commit()
            found.update(new)
        for i, k in enumerate(keys):
            out[i] = found[k]
        return out


def open_index(work: Path, name: str, titles: bool, docs: Sequence[str], encoder: Encoder, **config):
    """The ``extractor="ner"`` index of one dataset variant under ``work`` (built on first use: the
    build's wall time and encoder figures go to ``build.json`` beside it), opened with ``config``."""
    from hippo_engine import HippoRAG

    from .common import ForbiddenLLM

    folder = _folder(work, name, titles)
    meta = folder / "build.json"
    rag = HippoRAG(folder / "index", llm=ForbiddenLLM(), encoder=encoder, extractor="ner", show_progress=False,
                   **config)
    if not meta.exists():
        hits, misses = getattr(encoder, "hits", 0), getattr(encoder, "misses", 0)
        enc_s = getattr(encoder, "encode_s", 0.0)
        t = time.perf_counter()
        report = rag.index(list(docs))
        wall = time.perf_counter() - t
        info = {"passages": len(docs), "wall_s": wall, "timings": report.get("timings", {}),
                "encoded_texts": getattr(encoder, "misses", 0) - misses,
                "cached_texts": getattr(encoder, "hits", 0) - hits,
                "encode_s": getattr(encoder, "encode_s", 0.0) - enc_s, "graph": rag.graph_stats()}
        meta.write_text(json.dumps(info, indent=2), encoding="utf-8")
        logger.info("built %s in %.0f s", folder, wall)
    return rag


def build_info(work: Path, name: str, titles: bool) -> dict:
    """What ``open_index`` recorded about the build of one variant ({} before it)."""
    p = _folder(work, name, titles) / "build.json"
    return json.loads(p.read_text(encoding="utf-8")) if p.exists() else {}
