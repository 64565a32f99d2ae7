"""How a query reaches the graph: the linking strategies of HippoRAG 2 and its ablations.

Each strategy is a small frozen object carrying its own settings, chosen once per
``Retriever`` (:func:`resolve_linking`) instead of a ``linking`` string tested on every block:

- :class:`FactLinking` (``"fact"``, the paper): the entities of the query's best facts (after
  the recognition filter), ``top_k`` candidates.
- :class:`NerLinking` (``"ner"``): each query NER entity linked to its nearest entity node.
- :class:`QueryLinking` (``"query"``): the query vector linked to its ``top_k`` nearest entity nodes.
- :class:`NerFactLinking` (``"ner_fact"``, the LLM-free path): both the facts' entities and the
  NER entities, the larger seed per entity (see :meth:`.Retriever.hybrid_reset`).

A strategy turns one block of queries into :class:`Links` (one row per (query, entity node,
score)) and builds the block's reset matrix from them; the :class:`~.retriever.Retriever`
does the rest (dense fallback, PPR).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    from hippo_engine.config import RetrievalConfig
    from hippo_engine.retrieve.retriever import Block, Retriever


@dataclass
class Links:
    """A block's links: query number in the block, entity node and score per row, plus the
    seed table of query NER entities (``ner_fact`` only)."""

    query: np.ndarray
    nodes: np.ndarray
    scores: np.ndarray
    ner_table: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def linked(self, b: int) -> np.ndarray:
        """Which of the block's ``b`` queries reached the graph."""
        has = np.zeros(b, bool)
        has[self.query] = True
        if self.ner_table is not None:
            has[self.ner_table[0]] = True
        return has


def _fact_links(r: Retriever, block: Block) -> Links:
    """Links of the kept candidate facts: each fact's entities, with the fact's score."""
    cand_rows, cand_scores = block.candidates
    qq, cc = np.nonzero(block.kept)
    lengths, ln = r.fact_links(cand_rows[qq, cc])
    lq = np.repeat(qq, lengths)
    ls = np.repeat(cand_scores[qq, cc], lengths)
    ok = ln >= 0
    return Links(lq[ok], ln[ok], ls[ok])


def _vector_links(r: Retriever, vectors: list, per_vector: int) -> Links:
    """Links of each query's vectors (None: no vector) to their nearest entity nodes."""
    lq: list[int] = []
    ln: list[int] = []
    ls: list[float] = []
    for j, vecs in enumerate(vectors):
        linked = r.link_entities(vecs, per_vector) if vecs is not None and len(vecs) else []
        lq += [j] * len(linked)
        ln += [n for n, _ in linked]
        ls += [w for _, w in linked]
    return Links(np.array(lq, np.int64), np.array(ln, np.int64), np.array(ls, np.float64))


@dataclass(frozen=True)
class Linking:
    """Base of the strategies: ``name`` (the ``linking`` setting), whether the query's facts
    are scored (``scores_facts``: candidates, recognition filter) and whether query NER
    vectors are needed (``needs_ner``)."""

    name: ClassVar[str] = ""
    scores_facts: ClassVar[bool] = False
    needs_ner: ClassVar[bool] = False

    def candidate_count(self, filtered: bool) -> int:
        """Candidate facts per query (``filtered``: the recognition filter runs)."""
        return 0

    def links(self, r: Retriever, block: Block) -> Links:
        raise NotImplementedError

    def resets(self, r: Retriever, links: Links, block: Block, cols: np.ndarray
               ) -> tuple[np.ndarray, list | None]:
        """The block's reset matrix for queries ``cols`` and their entity seeds (None: not reported)."""
        return r.seeded_reset(links, block, cols)


@dataclass(frozen=True)
class FactLinking(Linking):
    """The paper: the entities of the ``top_k`` best facts that survive the filter."""

    top_k: int = 5
    name: ClassVar[str] = "fact"
    scores_facts: ClassVar[bool] = True

    def candidate_count(self, filtered: bool) -> int:
        return self.top_k

    def links(self, r: Retriever, block: Block) -> Links:
        return _fact_links(r, block)


@dataclass(frozen=True)
class QueryLinking(Linking):
    """Ablation: the query (fact-instruction) vector linked to its ``top_k`` nearest entities."""

    top_k: int = 5
    name: ClassVar[str] = "query"

    def links(self, r: Retriever, block: Block) -> Links:
        return _vector_links(r, [block.q_fact[j:j + 1] for j in range(block.size)], self.top_k)


@dataclass(frozen=True)
class NerLinking(Linking):
    """Ablation: each query NER entity linked to its nearest entity node."""

    name: ClassVar[str] = "ner"
    needs_ner: ClassVar[bool] = True

    def links(self, r: Retriever, block: Block) -> Links:
        vectors = block.ner_vectors if block.ner_vectors is not None else [None] * block.size
        return _vector_links(r, vectors, 1)


@dataclass(frozen=True)
class NerFactLinking(Linking):
    """The LLM-free path: the best facts' entities (``fact_top_k`` candidates with the filter,
    ``unfiltered_top_k`` without) and the query NER entities, the larger seed per entity."""

    fact_top_k: int = 5
    unfiltered_top_k: int = 1
    name: ClassVar[str] = "ner_fact"
    scores_facts: ClassVar[bool] = True
    needs_ner: ClassVar[bool] = True

    def candidate_count(self, filtered: bool) -> int:
        return self.fact_top_k if filtered else self.unfiltered_top_k

    def links(self, r: Retriever, block: Block) -> Links:
        links = _fact_links(r, block)
        links.ner_table = r.ner_table(block.ner_vectors)
        return links

    def resets(self, r: Retriever, links: Links, block: Block, cols: np.ndarray
               ) -> tuple[np.ndarray, list | None]:
        return r.hybrid_reset(links, block, cols), None


def resolve_linking(config: RetrievalConfig, extractor: str | None) -> Linking:
    """The strategy of ``config.linking`` (``"auto"``: ``ner_fact`` on an ``extractor="ner"``
    index, ``fact`` otherwise), with its settings from the retrieval config."""
    name = config.linking
    if name == "auto":
        name = "ner_fact" if extractor == "ner" else "fact"
    make = {"fact": lambda: FactLinking(config.linking_top_k),
            "query": lambda: QueryLinking(config.linking_top_k),
            "ner": NerLinking,
            "ner_fact": lambda: NerFactLinking(config.linking_top_k, config.ner_fact_top_k)}
    return make[name]()
