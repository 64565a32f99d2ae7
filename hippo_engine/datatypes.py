"""The data and result types shared across the engine: the one definition of each.

* :data:`Triple` and :class:`Hyperedge`: a passage's facts (a triple, or an n-ary fact linking a
  text to the entities it mentions);
* :class:`Document`: a document as a front door hands it over (id, text, title, metadata), and
  :func:`passage_text`, the one way a title and a text become the text the index holds;
* :class:`Extraction`: what an extractor returns for a batch of passages;
* :class:`QuerySolution`: one query's retrieval result (and, after reading, its answer);
* :class:`HiContext`: what a query mode assembled for the reader (and, per item,
  :class:`ContextItem`: which section it is in and why it was chosen).

Older import paths (``hippo_engine.qa.reader.QuerySolution``, ``hippo_engine.hirag.context.HiContext``,
``hippo_engine.index.extractors.Extraction``, ``hippo_engine.index.facts.Triple``...) re-export these.
No heavy library at import time (numpy is imported where an array is handled).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import numpy as np

#: A fact: (subject, predicate, object).
Triple = tuple[str, str, str]


class Hyperedge(NamedTuple):
    """An n-ary fact: a sentence (``extractor="ner"``) or an LLM knowledge segment
    (``extractor="nary"``) linked to every normalised entity it mentions. Its fact id is
    :func:`hippo_engine.ids.hyperedge_id` (of ``text``) and ``text`` is what the fact store embeds."""

    text: str
    entities: tuple[str, ...]


def hyperedge_triple(h: Hyperedge) -> Triple:
    """How a hyperedge is shown where a triple is expected (candidate facts, the recognition
    filter): ``(text, "mentions", "entity; entity; ...")``."""
    return (h.text, "mentions", "; ".join(h.entities))


# ----------------------------------------------------------------------------- documents
def passage_text(title: str | None, text: str) -> str:
    """The text the index holds for a document with a ``title``: ``"title\\ntext"`` (a title line, then the
    text, as corpora of ``{title, text}`` records are read); ``title`` None: the text alone. (A caller whose
    empty title means "none" passes ``title or None``.)"""
    return text if title is None else f"{title}\n{text}"


@dataclass(frozen=True)
class Document:
    """One document as the engine takes it from a front door: its ``id`` (the caller's, or the one derived from
    the indexed text, :func:`hippo_engine.ids.document_id`), ``text``, ``title`` (one line, or None) and
    ``metadata`` (a JSON object; None: none given, a known id keeps what is stored). Records
    ``{id?, text, title?, metadata?}`` become documents through :func:`hippo_engine.inputs.check_document_records`."""

    id: str
    text: str
    title: str | None = None
    metadata: dict | None = None

    @property
    def indexed_text(self) -> str:
        """What the index receives: :func:`passage_text` of the title (an empty one is none) and the text."""
        return passage_text(self.title or None, self.text)


# ----------------------------------------------------------------------------- extraction
@dataclass
class Extraction:
    """Facts of the passages that got them; ``failed`` maps the others to their error."""

    triples: dict[str, list[Triple]] | None = None
    hyperedges: dict[str, list[Hyperedge]] | None = None
    failed: dict[str, str] = field(default_factory=dict)
    llm_passages: int = 0     # passages sent to an LLM in this call

    @property
    def passages(self) -> set[str]:
        return set(self.triples or {}) | set(self.hyperedges or {})


# ----------------------------------------------------------------------------- solution
@dataclass
class QuerySolution:
    """One query's retrieval result and, after reading, its answer.

    ``docs`` are passages (``"title\\ntext"``) best first, ``doc_scores`` their scores.
    ``candidate_facts`` / ``kept_facts`` are the facts before and after the recognition filter,
    ``seed_entities`` the entities that seeded the graph walk; ``used_fallback`` is True when no
    entity reached the graph and the dense ranking was returned; ``explanations`` (``explain=True``)
    say why each returned passage ranked (:class:`Explanation`, rank order). ``errors`` lists the LLM calls
    that failed for this query (recognition filter, reader): a fallback with errors is a failure,
    not "nothing relevant". ``passage_ids`` are the passages' ids (:func:`hippo_engine.ids.chunk_id`,
    same order as ``docs``) and ``doc_ids`` for each passage the ids of the documents holding it.
    After reading, ``citations`` are the ids of the shown passages the reader cited (in the order
    cited), ``invalid_citations`` the number of its references to no shown passage, and
    ``answer_notes`` what was done to its answer (cut to length, rejected as ungrounded).
    In a hi_* mode with ``explain=True``, ``provenance`` holds every item of the mode's context with
    the section it is in and why it was chosen (:class:`ContextItem`; the passages' items, kind
    ``passage``, follow ``docs``).
    """

    question: str
    docs: list[str]
    doc_scores: np.ndarray | list[float]
    answer: str | None = None
    gold_answers: list[str] | None = None
    gold_docs: list[str] | None = None
    candidate_facts: list = field(default_factory=list)
    kept_facts: list = field(default_factory=list)
    seed_entities: list = field(default_factory=list)
    used_fallback: bool = False
    explanations: list[Explanation] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    passage_ids: list[str] = field(default_factory=list)
    doc_ids: list[list[str]] = field(default_factory=list)
    citations: list[str] = field(default_factory=list)
    invalid_citations: int = 0
    answer_notes: list[str] = field(default_factory=list)
    provenance: list[ContextItem] = field(default_factory=list)

    @classmethod
    def from_ranking(cls, question: str, docs: Sequence[str], scores, found: Any = None) -> QuerySolution:
        """A solution for ranked passages (``scores`` as float64); ``found`` (a retriever's
        ``RawResult``) supplies the candidate and kept facts, seed entities and fallback flag."""
        import numpy as np

        sol = cls(question=question, docs=list(docs), doc_scores=np.asarray(scores, dtype=np.float64))
        if found is not None:
            sol.candidate_facts, sol.kept_facts = found.candidate_facts, found.kept_facts
            sol.seed_entities, sol.used_fallback = found.seed_entities, found.used_fallback
        return sol

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (arrays become lists of floats, tuples become lists)."""
        import numpy as np

        return {
            "question": self.question,
            "docs": list(self.docs),
            "passage_ids": list(self.passage_ids),
            "doc_ids": [list(d) for d in self.doc_ids],
            "doc_scores": [float(s) for s in np.asarray(self.doc_scores, dtype=float).ravel()],
            "answer": self.answer,
            "gold_answers": None if self.gold_answers is None else list(self.gold_answers),
            "gold_docs": None if self.gold_docs is None else list(self.gold_docs),
            "candidate_facts": [_jsonable(f) for f in self.candidate_facts],
            "kept_facts": [_jsonable(f) for f in self.kept_facts],
            "seed_entities": [_jsonable(e) for e in self.seed_entities],
            "used_fallback": bool(self.used_fallback),
            "errors": list(self.errors),
            **({"explanations": [e.to_dict() for e in self.explanations]} if self.explanations else {}),
            "citations": list(self.citations),
            "invalid_citations": int(self.invalid_citations),
            "answer_notes": list(self.answer_notes),
            **({"provenance": [i.to_dict() for i in self.provenance]} if self.provenance else {}),
        }


def _jsonable(value: Any) -> Any:
    """Turn tuples, numpy scalars and arrays into plain JSON types (recursively)."""
    import numpy as np

    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


# ----------------------------------------------------------------------------- HiRAG context
#: the title each context section is shown under
SECTION_TITLES = {"reports": "Backgrounds", "bridge": "Reasoning Path", "entities": "Entities",
                  "relations": "Relations", "passages": "Sources"}


@dataclass
class HiContext:
    """What one query's retrieval assembled for the reader in some mode.

    ``sections`` maps section names (``reports``, ``bridge``, ``entities``, ``relations``,
    ``passages``) to their text, in order; ``tokens`` their token counts. ``passages`` is the
    passage ranking (best first) the mode produced; ``passage_context`` how many of them made
    it into the passages section. ``path`` is the bridge's entity path (names). ``provenance``
    (hi_* modes, :mod:`hippo_engine.hirag.provenance`): every item of the context, section by
    section, with why it was chosen (:class:`ContextItem`).
    """

    query: str
    mode: str
    sections: dict = field(default_factory=dict)
    tokens: dict = field(default_factory=dict)
    passages: list = field(default_factory=list)
    passage_context: int = 0
    entities: list = field(default_factory=list)
    communities: list = field(default_factory=list)
    key_entities: list = field(default_factory=list)
    path: list = field(default_factory=list)
    provenance: list[ContextItem] = field(default_factory=list)

    @property
    def text(self) -> str:
        """The sections as one string, each under a ``-----Title-----`` line."""
        return "\n".join(f"-----{SECTION_TITLES[k]}-----\n{v}\n" for k, v in self.sections.items())

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (with the rendered ``text``)."""
        return {"query": self.query, "mode": self.mode, "sections": dict(self.sections), "tokens": dict(self.tokens),
                "passages": list(self.passages), "passage_context": self.passage_context,
                "entities": list(self.entities), "communities": list(self.communities),
                "key_entities": list(self.key_entities), "path": list(self.path), "text": self.text,
                **({"provenance": [i.to_dict() for i in self.provenance]} if self.provenance else {})}


#: the kinds of context items: an entity line, a relation line, a community (its report), an
#: entity on the reasoning path, a passage
CONTEXT_ITEM_KINDS = ("entity", "relation", "community", "path_entity", "passage")


@dataclass
class ContextItem:
    """One item of a hi_* mode's context and why it is there.

    ``section``: the context section it belongs to (``entities``, ``relations``, ``reports``,
    ``bridge``, ``passages``); ``kind``: one of :data:`CONTEXT_ITEM_KINDS`; ``id``: the entity's,
    community's or passage's id (a relation: its two entity ids joined by ``|``); ``text``: what
    the section shows of it (an entity or relation line, a report title, an entity name, a passage
    title); ``reason``: why it was chosen, in words; ``rank``: its 1-based place in the section (a
    passage: in the mode's ranking; a path entity: on the path); ``score``: the number it was
    ranked by, when there is one (an entity's cosine similarity to the query, a relation's degree
    sum, how many of the query's top entities a community holds); ``via``: the entities (names) and
    communities (ids) it was chosen through; ``numbers``: the other figures of the reason;
    ``shown``: whether the reader sees it (False: a passage ranked past the passage budget, a
    community that only chose the bridge's key entities)."""

    section: str
    kind: str
    id: str
    text: str
    reason: str
    rank: int
    score: float | None = None
    via: list[str] = field(default_factory=list)
    numbers: dict[str, float] = field(default_factory=dict)
    shown: bool = True

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (plain floats, ints, strings and lists)."""
        return {"section": self.section, "kind": self.kind, "id": self.id, "text": self.text,
                "reason": self.reason, "rank": int(self.rank),
                "score": None if self.score is None else float(self.score), "via": list(self.via),
                "numbers": {str(k): float(v) for k, v in self.numbers.items()}, "shown": bool(self.shown)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextItem:
        """The inverse of :meth:`to_dict`."""
        return cls(**{**data, "via": list(data["via"]), "numbers": dict(data["numbers"])})


# ----------------------------------------------------------------------------- explanations
@dataclass
class SeedTerm:
    """One reset entry's term of a passage's PPR score: the seed ``entity`` (its name; a community
    seed shows its node id), its reset ``weight``, its ``contribution`` (weight x PPR from it to the
    passage, normalised as the score is) and its ``share`` of the score; ``kind``: ``entity`` or
    ``community``."""

    entity: str
    weight: float
    contribution: float
    share: float
    kind: str = "entity"

    def to_dict(self) -> dict[str, Any]:
        return {"entity": self.entity, "weight": float(self.weight), "contribution": float(self.contribution),
                "share": float(self.share), "kind": self.kind}


@dataclass
class PathEdge:
    """One step of a walk: ``source`` -> ``target`` (names), the edge's ``kind`` (``fact``,
    ``context``, ``synonymy``, or several joined by ``+``), the step's probability d x P and the
    ``text`` of the facts or sentences on the edge."""

    source: str
    target: str
    kind: str
    probability: float
    text: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "kind": self.kind,
                "probability": float(self.probability), "text": list(self.text)}


@dataclass
class ExplainedPath:
    """A seed's most probable walk to the passage: its ``nodes`` (names, seed first), ``edges``, its
    ``share`` of the passage's score (seed weight x walk probability, normalised as the score is)
    and ``seed_share``, the part of that seed's contribution this one walk carries."""

    nodes: list[str]
    edges: list[PathEdge]
    share: float
    seed_share: float = 0.0
    probability: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "edges": [e.to_dict() for e in self.edges], "share": float(self.share),
                "seed_share": float(self.seed_share), "probability": float(self.probability)}


@dataclass
class Explanation:
    """Why one passage ranked where it did (``QueryParam(explain=True)``, ``HippoRAG.explain``).

    ``score`` is the passage's score as ranked: the one walk's PPR probability, or with a second walk or a
    dense term the one score of ``retrieve/second/fusion.py`` (``ranked_score`` the score in the solution, which
    differs under ``dense_first`` or the dense fallback); ``seeds`` the entity (and community) terms,
    ``dense_prior`` the passage seeds' total term, ``dense_term`` dense retrieval's vote in the score (0
    for the paper's walk) and ``check`` = |sum of the terms - score| (the PPR solver's tolerance);
    ``paths`` the top walks from seeds to the passage. ``dense_score`` and
    ``dense_rank`` (1-based) place it under dense retrieval, ``rank`` (1-based) in the returned
    ranking; ``placed_by``: ``ppr`` (the one walk's probability), ``score`` (the one score of several
    terms), ``dense_first``, ``dense_agree`` (dense retrieval's best passage, moved first) or
    ``dense_fallback`` (``dense`` in the naive mode). ``walk``: what the score is made of, in a reader's
    words ("" for the one walk), ``walk_detail`` the same as a formula with the settings' names.
    ``candidate_facts``: the query's candidate facts (``fact``, ``score``, ``kept``);
    ``fallback_reason`` says why the dense fallback was used."""

    passage_id: str
    score: float
    seeds: list[SeedTerm]
    dense_prior: float
    paths: list[ExplainedPath]
    dense_score: float
    dense_rank: int
    rank: int
    ranked_score: float = 0.0
    check: float = 0.0
    placed_by: str = "ppr"
    walk: str = ""
    walk_detail: str = ""
    dense_term: float = 0.0
    used_fallback: bool = False
    fallback_reason: str = ""
    candidate_facts: list[dict[str, Any]] = field(default_factory=list)
    query: str = ""
    mode: str = "hipporag2"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (plain floats, ints, strings and lists)."""
        return {"passage_id": self.passage_id, "query": self.query, "mode": self.mode, "rank": int(self.rank),
                "score": float(self.score), "ranked_score": float(self.ranked_score),
                "placed_by": self.placed_by, "walk": self.walk, "walk_detail": self.walk_detail,
                "seeds": [s.to_dict() for s in self.seeds],
                "dense_prior": float(self.dense_prior), "dense_term": float(self.dense_term),
                "check": float(self.check),
                "paths": [p.to_dict() for p in self.paths], "dense_score": float(self.dense_score),
                "dense_rank": int(self.dense_rank), "used_fallback": bool(self.used_fallback),
                "fallback_reason": self.fallback_reason, "candidate_facts": _jsonable(self.candidate_facts)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Explanation:
        """The inverse of :meth:`to_dict`."""
        d = dict(data)
        d["seeds"] = [SeedTerm(**s) for s in d["seeds"]]
        d["paths"] = [ExplainedPath(**{**p, "edges": [PathEdge(**e) for e in p["edges"]]}) for p in d["paths"]]
        return cls(**d)
