"""A query's named entities, for ``linking="ner"`` / ``"ner_fact"``: by the LLM's NER prompt
(the paper's NER-to-node ablation) or by the packaged spaCy pipeline (no LLM)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from hippo_engine.config import HippoConfig
from hippo_engine.index.ner import NERExtractor
from hippo_engine.llm.base import LLMClient
from hippo_engine.text import normalize_phrase


def query_entities(llm, queries: Sequence[str], max_new_tokens: int | None, normalization: str) -> list[list[str]]:
    """Named entities of each query by the LLM's NER prompt, normalised (``linking="ner"``);
    a failed call gives no entities."""
    from hippo_engine.index.openie import ner_messages, parse_ner
    out = llm.generate_many([ner_messages(q) for q in queries], max_new_tokens=max_new_tokens)
    ents = []
    for res in out:
        names = parse_ner(res.text) if not isinstance(res, Exception) else []
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


def query_entity_names(queries: Sequence[str], config: HippoConfig, extractor: str | None,
                       llm: Callable[[], LLMClient], ner: NERExtractor) -> list[list[str]]:
    """Each query's normalised entities from the configured source (``query_ner``)."""
    if resolve_source(config.query_ner, extractor) == "llm":
        return query_entities(llm(), queries, config.max_new_tokens, config.normalization)
    return spacy_query_entities(ner, queries, config.normalization)
