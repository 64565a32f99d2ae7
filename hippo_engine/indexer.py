"""The index: passages, their OpenIE triples, the three embedding stores, synonymy and graph.

``Index`` owns the on-disk state under ``save_dir`` and keeps it consistent:
``add(passages)`` and ``remove(passage_ids)`` each run as one SQLite transaction, then the
graph is rebuilt from the stored content. Deleting passages leaves the index exactly as if
they had never been added.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Callable, Iterable, Mapping, Optional, Sequence

import numpy as np

from .config import HippoConfig
from .embedding import Encoder
from .graph import GraphData, build_graph
from .stores import IndexDB, SQLiteEmbeddingStore, StoreError
from .synonymy import update_synonymy
from .text import alnum_count, fact_text, mdhash_id, normalize_phrase

logger = logging.getLogger(__name__)

Triple = tuple[str, str, str]


def normalize_triples(triples: Iterable[Sequence[str]], mode: str) -> list[Triple]:
    """Normalise each part; drop triples whose subject or object normalises to nothing."""
    out = []
    for s, p, o in triples:
        s, p, o = normalize_phrase(s, mode), normalize_phrase(p, mode), normalize_phrase(o, mode)
        if s and o:
            out.append((s, p, o))
    return out


class Index:
    """Persistent HippoRAG index state. Not thread-safe for concurrent writers."""

    def __init__(self, save_dir: Path, config: HippoConfig, encoder_factory: Callable[[], Encoder],
                 embedding_model_name: str):
        self.save_dir = Path(save_dir)
        self.config = config
        self._encoder_factory = encoder_factory
        self._encoder: Optional[Encoder] = None
        self.db = IndexDB(self.save_dir / "index.sqlite")
        known = self.db.get_meta("embedding_model")
        if known is not None and known != embedding_model_name:
            raise StoreError(f"the index in {self.save_dir} was built with embedding model {known!r}, "
                             f"not {embedding_model_name!r}; use the same model or another save_dir")
        known_norm = self.db.get_meta("normalization")
        if known_norm is not None and known_norm != config.normalization:
            raise StoreError(f"the index in {self.save_dir} uses normalization={known_norm!r}; "
                             f"config says {config.normalization!r}")
        self.embedding_model_name = embedding_model_name
        self._stores: Optional[dict[str, SQLiteEmbeddingStore]] = None
        self.passage_triples: dict[str, list[Triple]] = self.db.load_passage_triples()
        self.synonymy: dict[str, dict[str, float]] = self.db.load_synonymy()
        self._graph: Optional[GraphData] = None
        self.timings: dict[str, float] = {}

    # ------------------------------------------------------------------ lazy parts
    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = self._encoder_factory()
        return self._encoder

    @property
    def stores(self) -> dict[str, SQLiteEmbeddingStore]:
        if self._stores is None:
            dim = self.db.get_meta("dim")
            dim = int(dim) if dim is not None else self.encoder.dim
            self._stores = {ns: SQLiteEmbeddingStore(self.db, ns, dim) for ns in ("passage", "entity", "fact")}
        return self._stores

    @property
    def version(self) -> str:
        return self.db.get_meta("version") or "0"

    @property
    def graph(self) -> GraphData:
        if self._graph is None:
            path = self.save_dir / "graph.npz"
            self._graph = GraphData.load(path, self.version)
            if self._graph is None:
                self._graph = self._build_graph()
                self._graph.save(path, self.version)
        return self._graph

    def _passage_ids(self) -> list[str]:
        return [r[0] for r in self.db.conn.execute("SELECT id FROM store_passage")]

    def _build_graph(self) -> GraphData:
        return build_graph(self._passage_ids(), self.passage_triples, self.synonymy)

    def has_passage(self, pid: str) -> bool:
        return self.db.conn.execute("SELECT 1 FROM store_passage WHERE id=?", (pid,)).fetchone() is not None

    def __len__(self) -> int:
        return self.db.conn.execute("SELECT COUNT(*) FROM store_passage").fetchone()[0]

    # ------------------------------------------------------------------ mutation
    def add(self, passages: Mapping[str, str], triples: Mapping[str, Sequence[Triple]]) -> dict:
        """Add passages (id -> text) with their raw OpenIE triples. Returns a small report."""
        cfg = self.config
        t0 = time.perf_counter()
        stores = self.stores
        new_ids = [p for p in passages if p not in stores["passage"]]
        if not new_ids:
            return {"added": 0}
        norm = {p: normalize_triples(triples.get(p, ()), cfg.normalization) for p in new_ids}
        ent_text: dict[str, str] = {}
        fact_txt: dict[str, str] = {}
        for p in new_ids:
            for t in norm[p]:
                for phrase in (t[0], t[2]):
                    eid = mdhash_id(phrase, "entity-")
                    if eid not in stores["entity"]:
                        ent_text[eid] = phrase
                ft = fact_text(t)
                fid = mdhash_id(ft, "fact-")
                if fid not in stores["fact"]:
                    fact_txt[fid] = ft
        t1 = time.perf_counter()
        enc = self.encoder
        show = cfg.show_progress
        pvec = enc.encode([passages[p] for p in new_ids], show_progress=show, desc="Embedding passages")
        t2 = time.perf_counter()
        eids = sorted(ent_text)
        evec = enc.encode([ent_text[e] for e in eids], show_progress=show, desc="Embedding entities")
        t3 = time.perf_counter()
        fids = sorted(fact_txt)
        fvec = enc.encode([fact_txt[f] for f in fids], show_progress=show, desc="Embedding facts")
        t4 = time.perf_counter()
        try:
            with self.db.transaction():
                self._write_meta()
                stores["passage"].upsert(new_ids, [passages[p] for p in new_ids], pvec)
                stores["entity"].upsert(eids, [ent_text[e] for e in eids], evec)
                stores["fact"].upsert(fids, [fact_txt[f] for f in fids], fvec)
                for p in new_ids:
                    self.db.put_passage_triples(p, norm[p])
                t5 = time.perf_counter()
                self._update_synonymy(added=eids, removed=())
                t6 = time.perf_counter()
                self._bump_version()
        except BaseException:
            self._reload()
            raise
        for p in new_ids:
            if norm[p]:
                self.passage_triples[p] = norm[p]
        self._rebuild_graph()
        t7 = time.perf_counter()
        self.timings = {"prepare": t1 - t0, "embed_passages": t2 - t1, "embed_entities": t3 - t2,
                        "embed_facts": t4 - t3, "write_stores": t5 - t4, "synonymy": t6 - t5,
                        "graph": t7 - t6}
        return {"added": len(new_ids), "new_entities": len(eids), "new_facts": len(fids)}

    def remove(self, passage_ids: Iterable[str]) -> dict:
        """Remove passages and everything only they contributed."""
        stores = self.stores
        gone = sorted({p for p in passage_ids if p in stores["passage"]})
        if not gone:
            return {"removed": 0}
        gone_set = set(gone)
        remaining = {p: t for p, t in self.passage_triples.items() if p not in gone_set}
        live_ents, live_facts = set(), set()
        for ts in remaining.values():
            for t in ts:
                live_ents.add(mdhash_id(t[0], "entity-"))
                live_ents.add(mdhash_id(t[2], "entity-"))
                live_facts.add(mdhash_id(fact_text(t), "fact-"))
        dead_ents = [e for e in stores["entity"].ids if e not in live_ents]
        dead_facts = [f for f in stores["fact"].ids if f not in live_facts]
        try:
            with self.db.transaction():
                stores["passage"].delete(gone)
                stores["entity"].delete(dead_ents)
                stores["fact"].delete(dead_facts)
                self.db.delete_passage_triples(gone)
                self._update_synonymy(added=(), removed=dead_ents)
                self._bump_version()
        except BaseException:
            self._reload()
            raise
        self.passage_triples = remaining
        self._rebuild_graph()
        return {"removed": len(gone), "removed_entities": len(dead_ents), "removed_facts": len(dead_facts)}

    # ------------------------------------------------------------------ internals
    def _update_synonymy(self, added: Sequence[str], removed: Sequence[str]) -> None:
        cfg = self.config
        ents = self.stores["entity"]
        eligible = np.fromiter((alnum_count(ents.text(e)) >= cfg.synonymy_min_alnum_chars for e in ents.ids),
                               bool, len(ents))
        changed = update_synonymy(self.synonymy, ents.ids, ents.matrix, eligible, added, removed,
                                  threshold=cfg.synonymy_threshold, max_neighbors=cfg.synonymy_max_neighbors,
                                  block_size=cfg.synonymy_block_size)
        self.db.replace_synonymy_lists({k: (v or {}) for k, v in changed.items()})
        for k, v in changed.items():
            if v:
                self.synonymy[k] = v
            else:
                self.synonymy.pop(k, None)

    def _write_meta(self) -> None:
        if self.db.get_meta("embedding_model") is None:
            self.db.set_meta("embedding_model", self.embedding_model_name)
            self.db.set_meta("dim", str(self.stores["passage"].dim))
            self.db.set_meta("normalization", self.config.normalization)

    def _bump_version(self) -> None:
        self.db.set_meta("version", str(int(self.version) + 1))

    def _reload(self) -> None:
        for s in (self._stores or {}).values():
            s.reload()
        self.passage_triples = self.db.load_passage_triples()
        self.synonymy = self.db.load_synonymy()
        self._graph = None

    def _rebuild_graph(self) -> None:
        self._graph = self._build_graph()
        try:
            self._graph.save(self.save_dir / "graph.npz", self.version)
        except OSError as e:  # the graph is derived data: losing the file costs a rebuild only
            logger.warning("could not save graph.npz: %s", e)

    def close(self) -> None:
        self.db.close()
