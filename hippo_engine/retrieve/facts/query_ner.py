"""A query's named entities, for ``linking="ner"`` / ``"ner_fact"``: by the LLM's NER prompt
(the paper's NER-to-node ablation) or by the packaged spaCy pipeline (no LLM)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hippo_engine.index.ner import NERExtractor
from hippo_engine.llm.base import LLMClient, unparseable_reason
from hippo_engine.models.encoder import Encoder
from hippo_engine.normalize import normalize_phrase
from hippo_engine.progress import QUIET, Progress

#: question -> texts of its failed LLM calls (what ``QuerySolution.errors`` lists)
Errors = dict[str, list[str]]


def query_entities(llm, queries: Sequence[str], max_new_tokens: int | None, normalization: str,
                   errors: Errors | None = None, progress: Progress = QUIET) -> list[list[str]]:
    """Named entities of each query by the LLM's NER prompt, normalised (``linking="ner"``).

    A failed call, or a reply that cannot be read (it is then dropped from the LLM cache so a
    rerun asks again), gives no entities and is noted in ``errors`` under the query."""
    from hippo_engine.index.openie import ner_messages, read_ner
    out = llm.generate_many([ner_messages(q) for q in queries], max_new_tokens=max_new_tokens,
                            show_progress=progress.show and len(queries) > 1, desc="Query NER")
    ents = []
    for q, res in zip(queries, out, strict=True):
        names, problem = [], None
        if isinstance(res, Exception):
            problem = str(res)
        else:
            try:
                names = read_ner(res.text)
            except ValueError as e:
                llm.discard(res)
                problem = f"{unparseable_reason(res.text)} ({e})"
        if problem is not None and errors is not None:
            errors.setdefault(q, []).append(f"query NER: {problem}")
        ents.append([n for n in (normalize_phrase(e, normalization) for e in names) if n])
    return ents


def spacy_query_entities(ner: NERExtractor, queries: Sequence[str], normalization: str) -> list[list[str]]:
    """Named entities of each query by spaCy, normalised, duplicates dropped."""
    return [list(dict.fromkeys(n for n in (normalize_phrase(e, normalization) for e in es) if n))
            for es in ner.query_entities(queries)]


def resolve_source(source: str, extractor: str | None) -> str:
    """``query_ner="auto"``: spaCy on an ``extractor="ner"`` index, the LLM otherwise."""
    if source == "auto":
        return "spacy" if extractor == "ner" else "llm"
    return source


@dataclass(frozen=True)
class QueryNERSettings:
    """What query NER reads of the configuration: the source (``query_ner``: ``"llm"``,
    ``"spacy"`` or ``"auto"``), the phrase ``normalization`` of the index, the LLM's
    ``max_new_tokens`` and the ``progress`` of its LLM batches."""

    source: str = "auto"
    normalization: str = "unicode"
    max_new_tokens: int | None = None
    progress: Progress = QUIET


def query_entity_names(queries: Sequence[str], settings: QueryNERSettings, extractor: str | None,
                       llm: Callable[[], LLMClient], ner: NERExtractor,
                       errors: Errors | None = None) -> list[list[str]]:
    """Each query's normalised entities from the configured source (``query_ner``); failed LLM
    calls are noted in ``errors``."""
    if resolve_source(settings.source, extractor) == "llm":
        return query_entities(llm(), queries, settings.max_new_tokens, settings.normalization, errors,
                              progress=settings.progress)
    return spacy_query_entities(ner, queries, settings.normalization)


def query_entity_vectors(queries: Sequence[str], settings: QueryNERSettings, extractor: str | None,
                         llm: Callable[[], LLMClient], ner: NERExtractor, encoder,
                         errors: Errors | None = None) -> list[np.ndarray | None]:
    """Each query's entity vectors (rows of ``encoder.encode`` over its entity names; None for
    a query without entities), every query's entities encoded in one call."""
    names = query_entity_names(queries, settings, extractor, llm, ner, errors)
    if not any(names):
        return [None] * len(names)
    flat = encoder.encode([e for ents in names for e in ents])
    ends = np.cumsum([len(ents) for ents in names])
    return [flat[e - len(ents):e] if ents else None for ents, e in zip(names, ends, strict=True)]


class QueryNER:
    """Query entity vectors for a linking that ``needs_ner``: ``settings``, the index's extractor
    (a provider: it is known once the index has documents), the LLM and encoder providers and the
    spaCy ``ner``. Called as ``query_ner(queries, failed)``; failed LLM calls go to ``failed``."""

    def __init__(self, settings: QueryNERSettings, extractor: Callable[[], str | None], llm: Callable[[], LLMClient],
                 ner: NERExtractor, encoder: Callable[[], Encoder]):
        self.settings = settings
        self._extractor, self._llm, self._ner, self._encoder = extractor, llm, ner, encoder

    def names(self, queries: list[str], failed: Errors) -> list[list[str]]:
        """Each query's normalised entity names (to be encoded with the query itself, see
        ``retrieve.encoding.encode_with_mentions``); failed LLM calls go to ``failed``."""
        return query_entity_names(queries, self.settings, self._extractor(), self._llm, self._ner, failed)

    def __call__(self, queries: list[str], failed: Errors) -> list[np.ndarray | None]:
        return query_entity_vectors(queries, self.settings, self._extractor(), self._llm, self._ner, self._encoder(),
                                    failed)
