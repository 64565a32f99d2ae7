"""``HippoRAG``: the thin facade over the index, retrieval and QA modules."""
from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Optional, Sequence

from .chunking import chunk_text
from .config import HippoConfig
from .embedding import Encoder
from .llm.base import LLMClient
from .openie import OpenIE, OpenIEError, OpenIEResult, load_openie_file, save_openie_file
from .indexer import Index
from .text import mdhash_id

logger = logging.getLogger(__name__)


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


class HippoRAG:
    """Long-term memory for LLM applications, HippoRAG 2 style.

    ``HippoRAG(save_dir)`` opens (or creates) an index in ``save_dir`` with the offline default
    models: the packaged Qwen2.5-Coder-0.5B-Instruct for OpenIE, filtering and reading, and
    all-MiniLM-L6-v2 for embeddings. Pass ``llm_model_name`` / ``embedding_model_name`` (and
    ``llm_base_url=...`` for an OpenAI-compatible server) to use others. Keyword overrides are
    ``HippoConfig`` field names: ``HippoRAG(dir, use_filter=False, damping=0.5)``.

    Models are loaded lazily, on first use: opening an index to read statistics costs nothing.
    """

    def __init__(self, save_dir: str | Path, llm_model_name: Optional[str] = None,
                 embedding_model_name: Optional[str] = None, config: Optional[HippoConfig] = None,
                 *, llm: Optional[LLMClient] = None, encoder: Optional[Encoder] = None, **overrides):
        config = config or HippoConfig()
        if overrides:
            config = config.replace(**overrides)
        self.config = config
        self.save_dir = Path(save_dir)
        self.save_dir.mkdir(parents=True, exist_ok=True)
        from .model_assets import DEFAULT_EMBEDDER
        try:
            from .model_assets import DEFAULT_LLM
        except ImportError:  # pragma: no cover
            DEFAULT_LLM = "Qwen2.5-Coder-0.5B-Instruct"
        self.llm_model_name = llm_model_name or (llm.model_name if llm is not None else DEFAULT_LLM)
        self.embedding_model_name = embedding_model_name or (encoder.name if encoder is not None else DEFAULT_EMBEDDER)
        self._llm = llm
        self._encoder = encoder
        self.index_state = Index(self.save_dir, config, lambda: self.encoder, self.embedding_model_name)
        self.openie_path = self.save_dir / f"openie_results_ner_{_safe_name(self.llm_model_name)}.json"
        self._openie: dict[str, OpenIEResult] = load_openie_file(self.openie_path) if self.openie_path.exists() else {}
        self._retriever = None

    # ------------------------------------------------------------------ models
    @property
    def llm(self) -> LLMClient:
        if self._llm is None:
            from .llm.factory import make_llm
            self._llm = make_llm(self.llm_model_name, self.config, cache_dir=self.save_dir)
        return self._llm

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            from .embedding import TransformersEncoder
            cfg = self.config
            self._encoder = TransformersEncoder(self.embedding_model_name, batch_size=cfg.embedding_batch_size,
                                                dtype=cfg.embedding_dtype, max_length=cfg.embedding_max_length)
        return self._encoder

    # ------------------------------------------------------------------ documents
    def _passages(self, docs: Sequence[str], *, what: str) -> dict[str, str]:
        """Validate documents and turn them into ``{chunk_id: passage}`` (chunked if asked)."""
        if isinstance(docs, str) or not isinstance(docs, (list, tuple)):
            raise TypeError(f"{what}() takes a list of strings, got {type(docs).__name__}")
        bad = [i for i, d in enumerate(docs) if not isinstance(d, str)]
        if bad:
            raise TypeError(f"{what}(): documents must be strings; items {bad[:10]} are not")
        blank = [i for i, d in enumerate(docs) if not d.strip()]
        if blank:
            logger.warning("%s(): skipping %d empty or whitespace-only document(s) at positions %s",
                           what, len(blank), blank[:10])
        out: dict[str, str] = {}
        tokenizer = None
        if self.config.chunk_size:
            tokenizer = getattr(self.encoder, "tokenizer", None)
        for d in docs:
            if not d.strip():
                continue
            pieces = (chunk_text(d, self.config.chunk_size, self.config.chunk_overlap, tokenizer)
                      if self.config.chunk_size else [d])
            for p in pieces:
                out.setdefault(mdhash_id(p, "chunk-"), p)
        dup = sum(1 for d in docs if d.strip()) - len(out) if not self.config.chunk_size else 0
        if dup > 0:
            logger.info("%s(): %d duplicate document(s) collapsed", what, dup)
        return out

    def import_openie(self, path: str | Path) -> int:
        """Seed OpenIE results from a file (reference or HippoRAG v1 format). Returns how many
        passages it covers. Passages indexed later use these results instead of the LLM."""
        loaded = load_openie_file(path)
        self._openie.update(loaded)
        save_openie_file(self.openie_path, self._openie.values())
        logger.info("imported OpenIE results for %d passages from %s", len(loaded), path)
        return len(loaded)

    def index(self, docs: Sequence[str]) -> dict:
        """Add documents to the memory. Re-indexing a document already present is a no-op.

        Passages with no OpenIE result yet go to the LLM (results are saved as they come, so a
        crash loses no LLM work). If the LLM fails for some passages, the others are indexed,
        and ``OpenIEError`` is raised afterwards naming the failed ones; rerun to retry them.
        Returns a report with counts and per-stage timings.
        """
        t0 = time.perf_counter()
        passages = self._passages(docs, what="index")
        if not passages:
            logger.warning("index(): nothing to index")
            return {"added": 0}
        new = {k: v for k, v in passages.items() if not self.index_state.has_passage(k)}
        if not new:
            return {"added": 0}
        missing = {k: v for k, v in new.items() if k not in self._openie}
        failed: dict[str, str] = {}
        t1 = time.perf_counter()
        if missing:
            logger.info("running OpenIE on %d passage(s) with %s", len(missing), self.llm_model_name)
            extractor = OpenIE(self.llm, max_new_tokens=self.config.max_new_tokens,
                               show_progress=self.config.show_progress)
            results, failed = extractor.run(missing)
            self._openie.update(results)
            save_openie_file(self.openie_path, self._openie.values())
        t2 = time.perf_counter()
        ok = {k: v for k, v in new.items() if k in self._openie}
        report = self.index_state.add(ok, {k: self._openie[k].triples for k in ok})
        self._retriever = None
        report["timings"] = {"openie": t2 - t1, **self.index_state.timings, "total": time.perf_counter() - t0}
        report["openie_llm_passages"] = len(missing)
        if failed:
            raise OpenIEError(f"OpenIE failed for {len(failed)} of {len(new)} new passage(s); the other "
                              f"{len(ok)} were indexed. Run index() again to retry. First error: "
                              f"{next(iter(failed.values()))}", failed)
        return report

    def delete(self, docs: Sequence[str]) -> dict:
        """Remove documents; the index becomes exactly as if they had never been added."""
        passages = self._passages(docs, what="delete")
        report = self.index_state.remove(passages)
        if report["removed"] < len(passages):
            logger.warning("delete(): %d of %d document(s) were not in the index",
                           len(passages) - report["removed"], len(passages))
        self._retriever = None
        return report

    # ------------------------------------------------------------------ inspection
    def graph_stats(self) -> dict:
        """Node and edge counts of the graph (edges counted once per node pair)."""
        return self.index_state.graph.stats()

    @property
    def graph(self):
        """The graph as ``GraphData`` (``.to_igraph()`` gives an ``igraph.Graph``)."""
        return self.index_state.graph

    def close(self) -> None:
        self.index_state.close()

    def __enter__(self) -> "HippoRAG":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
