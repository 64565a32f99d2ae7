"""A passage's facts before they enter the index: normalisation, and how the graph sees them."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hippo_engine.text import Hyperedge, Triple, hyperedge_graph_triples, normalize_phrase


def normalize_triples(triples: Iterable[Sequence[str]], mode: str) -> list[Triple]:
    """Normalise each part; drop triples whose subject or object normalises to nothing."""
    out = []
    for s, p, o in triples:
        s, p, o = normalize_phrase(s, mode), normalize_phrase(p, mode), normalize_phrase(o, mode)
        if s and o:
            out.append((s, p, o))
    return out


def normalize_hyperedges(hyperedges: Iterable[Hyperedge], mode: str) -> list[Hyperedge]:
    """Normalise each entity (duplicates dropped, first mention first); drop hyperedges left
    without an entity (they could never seed the graph)."""
    out = []
    for h in hyperedges:
        ents = tuple(dict.fromkeys(e for e in (normalize_phrase(x, mode) for x in h.entities) if e))
        text = h.text.replace("\x00", " ").strip()   # NUL: never meaningful, and PostgreSQL cannot store it
        if ents and text:
            out.append(Hyperedge(text, ents))
    return out


def graph_input(triples: Mapping[str, Sequence[Triple]], hyperedges: Mapping[str, Sequence[Hyperedge]]
                ) -> tuple[dict[str, list[Triple]], dict[str, list[float]]]:
    """Per passage, the (pseudo-)triples the graph is built from and, for hyperedges, their
    fact weights (see ``text.hyperedge_graph_triples``)."""
    out = {p: list(ts) for p, ts in triples.items() if ts}
    weights: dict[str, list[float]] = {}
    for p, hs in hyperedges.items():
        if hs:
            out[p], weights[p] = hyperedge_graph_triples(hs)
    return out, weights
