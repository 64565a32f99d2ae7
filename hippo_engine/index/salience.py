"""A passage's topic entity without a title: the coreference-free stand-in for the title line.

On titled passages (``"title\\ntext"``) the ``ner`` extractor adds the title to every sentence's
entities (:mod:`.ner`): a sentence such as "She was born in Paris" then also links the page's
subject. Notes, chat turns, tickets and chunks of long documents have no title. The rules here pick
one entity of a passage from its sentences' entities (the passage's hyperedges) to play that part:

- ``"central"``: the entity mentioned in the most sentences (ties: the one mentioned first). On a
  titled passage the title is in every sentence, so it is chosen (or another entity present in every
  sentence, which every sentence already links): the rule never changes what a titled passage links.
- ``"first"``: the first entity of the first sentence that has one (the subject of a Wikipedia-style
  opening sentence).

Nothing here reads the passage text, so the rule costs nothing at indexing time. The retriever's
hop index (:mod:`hippo_engine.retrieve.second.hop_index`) records each passage's topic entity: it is the "page"
of that entity for ``second_hop="reseed"``. Adding it to every linked sentence's entities, as a title
would be, changed no recall on untitled MuSiQue or 2Wiki (``reproduce/results/recall/README.md``), so the
linking does not do it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from hippo_engine.datatypes import Hyperedge

TOPIC_RULES = ("central", "first")


def topic_entity(hyperedges: Sequence[Hyperedge], rule: str = "central") -> str | None:
    """The topic entity of one passage's hyperedges by ``rule`` (None: no entity at all)."""
    if rule not in TOPIC_RULES:
        raise ValueError(f"topic entity rule must be one of {', '.join(TOPIC_RULES)}, got {rule!r}")
    if rule == "first":
        return next((h.entities[0] for h in hyperedges if h.entities), None)
    count: dict[str, int] = {}
    for h in hyperedges:
        for e in dict.fromkeys(h.entities):
            count[e] = count.get(e, 0) + 1
    if not count:
        return None
    best = max(count.values())
    return next(e for e, c in count.items() if c == best)    # dicts keep first-mention order


def topic_entities(passage_hyperedges: Mapping[str, Sequence[Hyperedge]], rule: str = "central") -> dict[str, str]:
    """passage id -> its topic entity (passages without an entity are left out)."""
    out = {}
    for pid, hs in passage_hyperedges.items():
        e = topic_entity(hs, rule)
        if e is not None:
            out[pid] = e
    return out


__all__ = ["TOPIC_RULES", "topic_entities", "topic_entity"]
