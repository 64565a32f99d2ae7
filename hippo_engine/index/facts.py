"""A passage's facts before they enter the index: normalisation, and how the graph sees them."""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hippo_engine.datatypes import Hyperedge, Triple
from hippo_engine.normalize import normalize_phrase


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
    fact weights (see :func:`hyperedge_graph_triples`)."""
    out = {p: list(ts) for p, ts in triples.items() if ts}
    weights: dict[str, list[float]] = {}
    for p, hs in hyperedges.items():
        if hs:
            out[p], weights[p] = hyperedge_graph_triples(hs)
    return out, weights


#: co-occurrence weights are rounded to multiples of this, so sums are exact in any order
WEIGHT_QUANTUM = 2.0 ** -20


def hyperedge_graph_triples(hyperedges: Sequence[Hyperedge], cooccurrence: bool = True
                            ) -> tuple[list[Triple], list[float]]:
    """How the graph sees a passage's hyperedges, as pseudo-triples and their fact weights.

    Every mentioned entity gives ``(e, "", e)`` (a passage-entity context edge; self-loops are
    never graph edges). With ``cooccurrence``, each hyperedge of ``m`` entities adds its
    entities as a clique, ``1 / (m - 1)`` per pair (so a hyperedge adds weight 1 to each of its
    entities however many it links), rounded to a multiple of ``WEIGHT_QUANTUM`` so that sums
    do not depend on insertion order.
    """
    ents = list(dict.fromkeys(e for h in hyperedges for e in h.entities))
    triples: list[Triple] = [(e, "", e) for e in ents]
    weights = [0.0] * len(ents)
    if cooccurrence:
        for h in hyperedges:
            m = len(h.entities)
            if m < 2:
                continue
            w = round(1.0 / (m - 1) / WEIGHT_QUANTUM) * WEIGHT_QUANTUM
            for i in range(m):
                for j in range(i + 1, m):
                    triples.append((h.entities[i], "", h.entities[j]))
                    weights.append(w)
    return triples, weights
