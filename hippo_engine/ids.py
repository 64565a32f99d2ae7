"""Ids of the index and their prefixes: the one place they are written.

Every id is a prefix and the md5 of a text (:func:`mdhash_id`), as in the HippoRAG reference
implementation, so ids of its released files carry over:

* a passage: ``CHUNK_PREFIX`` + md5 of the passage text (:func:`chunk_id`);
* an entity: ``ENTITY_PREFIX`` + md5 of the normalised phrase (:func:`entity_id`);
* a fact: ``FACT_PREFIX`` + md5 of its text (:func:`fact_id`): a triple's text is its tuple repr
  (:func:`fact_text`, :func:`triple_id`), a hyperedge's its sentence or segment
  (:func:`hyperedge_id`);
* a document given without an id: ``DOC_PREFIX`` + md5 of its text (:func:`document_id`);
* a HiRAG community: ``COMMUNITY_PREFIX`` + md5 of its sorted member ids (:func:`community_id`).

Pure functions of the standard library (the command line imports this module).
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hippo_engine.datatypes import Hyperedge, Triple

CHUNK_PREFIX = "chunk-"
ENTITY_PREFIX = "entity-"
FACT_PREFIX = "fact-"
DOC_PREFIX = "doc-"
COMMUNITY_PREFIX = "community-"


def mdhash_id(text: str, prefix: str = "") -> str:
    """``prefix + md5(text)``: the reference implementation's ids."""
    return prefix + hashlib.md5(text.encode("utf-8")).hexdigest()


def chunk_id(passage: str) -> str:
    """The id of a passage (``"title\\ntext"``)."""
    return mdhash_id(passage, CHUNK_PREFIX)


def entity_id(phrase: str) -> str:
    """The id of an entity (its normalised phrase)."""
    return mdhash_id(phrase, ENTITY_PREFIX)


def fact_id(text: str) -> str:
    """The id of a fact given its text (:func:`fact_text` of a triple, a hyperedge's ``text``)."""
    return mdhash_id(text, FACT_PREFIX)


def fact_text(triple: Sequence[str]) -> str:
    """How a fact is rendered for its id and embedding: the reference's tuple repr,
    e.g. ``"('radio city', 'located in', 'india')"``, so reference ids carry over."""
    return repr(tuple(triple))


def triple_id(triple: Sequence[str]) -> str:
    """The fact id of a triple."""
    return fact_id(fact_text(triple))


def hyperedge_id(hyperedge: Hyperedge) -> str:
    """The fact id of a hyperedge (of its text)."""
    return fact_id(hyperedge.text)


def facts_by_id(passage_triples: Mapping[str, Iterable[Triple]]) -> dict[str, Triple]:
    """fact id -> triple for every triple of ``passage_triples`` (passage id -> triples); a
    fact stated by several passages appears once."""
    out: dict[str, Triple] = {}
    for ts in passage_triples.values():
        for t in ts:
            out.setdefault(triple_id(t), t)
    return out


def hyperedges_by_id(passage_hyperedges: Mapping[str, Iterable[Hyperedge]]) -> dict[str, Hyperedge]:
    """fact id -> hyperedge over all passages (first occurrence wins; equal texts share an id)."""
    out: dict[str, Hyperedge] = {}
    for hs in passage_hyperedges.values():
        for h in hs:
            out.setdefault(hyperedge_id(h), h)
    return out


def document_id(text: str) -> str:
    """The id of a document given without one."""
    return mdhash_id(text, DOC_PREFIX)


def legacy_document_id(pid: str) -> str:
    """The document id of a passage without document rows (indexed before ids were kept): the
    id its text gets as a document, the passage id with its prefix swapped."""
    return DOC_PREFIX + pid.removeprefix(CHUNK_PREFIX)


def legacy_passage_id(doc_id: str) -> str | None:
    """The passage a legacy document id stands for (None for ids not of the derived form)."""
    return CHUNK_PREFIX + doc_id[len(DOC_PREFIX):] if doc_id.startswith(DOC_PREFIX) else None


def member_key(member_ids: Iterable[str]) -> str:
    """md5 of the sorted member ids, one per line: identifies a member set."""
    return hashlib.md5("\n".join(sorted(member_ids)).encode("utf-8")).hexdigest()


def community_id(member_ids: Iterable[str]) -> str:
    """The id of a community: the prefix and its :func:`member_key`."""
    return COMMUNITY_PREFIX + member_key(member_ids)
