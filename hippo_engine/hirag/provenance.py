"""Why each item of a hi_* context is there: :func:`context_items`.

While :meth:`~.context.HiRAGEngine.context` assembles a context it keeps what it chose from in a
:class:`ContextTrace` (graph nodes, communities, the bridge's legs, how many lines each section
kept). From that trace, and only from it, this module says for every item of every section which
section it is in and why it was chosen (:class:`~hippo_engine.datatypes.ContextItem`):

* an entity line: its rank and cosine similarity in the vector search of the query;
* a relation line: the top entity it is incident to, its degree sum and weight (the order);
* a community: how many of the query's top entities it holds (which), its level and report rating,
  and in the bridge modes the key entities it gave the reasoning path;
* a reasoning-path entity: a key entity (the community that picked it, its rank and similarity), or a
  vertex on the shortest path between two key entities (and their communities), or a jump;
* a bridge line: a step along the path, or another relation among the path's entities;
* a passage: the top entity whose text unit it is (with the neighbours it shares), or the path
  relation it states, and the top entities it mentions; ``shown`` says whether it fit the budget.

Nothing here changes what the context holds or how it ranks.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from hippo_engine.datatypes import ContextItem, HiContext

#: the engine a context was assembled on (``hippo_engine.hirag.context.HiRAGEngine``, which imports this module)
Engine = Any


class Segment(NamedTuple):
    """One leg of the bridge path: from required vertex ``start`` to ``end``, the ``nodes`` added
    after ``start`` (ending with ``end``), ``jump``: True when ``end`` was unreachable from ``start``."""

    start: int
    end: int
    nodes: list[int]
    jump: bool


@dataclass
class ContextTrace:
    """What one context was assembled from (graph node indices, community indices).

    ``overall``: the key-entity candidates (node, similarity), best first; ``top``: the top
    entities; ``text_units``: their passages in order; ``communities``: the communities used (by
    index); ``keys``, ``legs``, ``path``: the bridge's key entities, legs and path;
    ``bridge_pairs``/``relation_pairs``: the entity pairs whose lines the bridge and relations
    sections kept; ``shown``: lines kept in the entities and reports sections; ``ranking``: the
    ranked passage nodes."""

    overall: list[tuple[int, float]]
    top: list[int]
    text_units: list[int]
    communities: list[int] = field(default_factory=list)
    keys: list[int] = field(default_factory=list)
    legs: list[Segment] = field(default_factory=list)
    path: list[int] = field(default_factory=list)
    bridge_pairs: list[tuple[int, int]] = field(default_factory=list)
    relation_pairs: list[tuple[int, int]] = field(default_factory=list)
    shown: dict[str, int] = field(default_factory=dict)
    ranking: list[int] = field(default_factory=list)


def context_items(eng: Engine, ctx: HiContext, tr: ContextTrace) -> list[ContextItem]:
    """Every item of ``ctx`` with its section and reason, section by section in the context's order."""
    why = _Why(eng, tr)
    out: list[ContextItem] = []
    for section in ctx.sections:
        if section == "reports":
            out.extend(why.communities("reports", tr.shown.get("reports", 0)))
        elif section == "bridge":
            if "reports" not in ctx.sections:      # hi_bridge: the communities only chose the key entities
                out.extend(why.communities("bridge", 0))
            out.extend(why.path_entities())
            out.extend(why.bridge_lines())
        elif section == "entities":
            out.extend(why.entities(tr.shown.get("entities", 0)))
        elif section == "relations":
            out.extend(why.relations())
        elif section == "passages":
            out.extend(why.passages(ctx.passage_context))
    return out


def _f(x: float) -> str:
    return f"{x:.2f}"


def _names(names: Sequence[str]) -> str:
    return ", ".join(names)


class _Why:
    """The reasons of one context's items (``eng``: the engine that built it, ``tr``: its trace)."""

    def __init__(self, eng: Engine, tr: ContextTrace):
        self.eng, self.tr = eng, tr
        self.entity_rank = {e: (i + 1, s) for i, (e, s) in enumerate(tr.overall)}
        self.top_set = set(tr.top)
        self.picked = self._picked()

    def _picked(self) -> dict[int, list[int]]:
        """Key entity -> the communities (indices) that picked it, as ``key_entities`` does."""
        candidates = [e for e, _ in self.tr.overall]
        out: dict[int, list[int]] = {}
        for ci in self.tr.communities:
            members = self.eng.member_sets[ci]
            for e in [x for x in candidates if x in members][: self.eng.config.hi_top_m]:
                out.setdefault(e, []).append(ci)
        return out

    def node_id(self, node: int) -> str:
        return str(self.eng.node_ids[node])

    def pair_id(self, p: tuple[int, int]) -> str:
        return f"{self.node_id(p[0])}|{self.node_id(p[1])}"

    def cid(self, ci: int) -> str:
        return self.eng.communities[ci].id

    def label(self, cis: Sequence[int]) -> str:
        """``community "title" (level l)``, or several of them, for a reason's text."""
        parts = []
        for ci in cis:
            c = self.eng.communities[ci]
            rep = self.eng.reports.get(c.id)
            parts.append(f'"{rep.title if rep is not None else c.id}" (level {c.level})')
        return ("community " if len(parts) == 1 else "communities ") + _names(parts)

    def place(self, e: int) -> str:
        """``entity rank r, similarity s`` (or that it is not among the query's nearest entities)."""
        if e not in self.entity_rank:
            return "not among the query's nearest entities"
        r, s = self.entity_rank[e]
        return f"entity rank {r}, similarity {_f(s)}"

    def place_numbers(self, e: int) -> dict[str, float]:
        if e not in self.entity_rank:
            return {}
        r, s = self.entity_rank[e]
        return {"entity_rank": float(r), "similarity": float(s)}

    def weight(self, p: tuple[int, int]) -> float:
        return float(self.eng.pair_weight.get(p, 0.0))

    def degree_sum(self, p: tuple[int, int]) -> int:
        return int(self.eng.degree[p[0]] + self.eng.degree[p[1]])

    # ------------------------------------------------------------------ sections
    def entities(self, shown: int) -> list[ContextItem]:
        """The entities section: the query's nearest entities by vector search."""
        out = []
        for i, (e, s) in enumerate(self.tr.overall[:shown]):
            out.append(ContextItem(
                "entities", "entity", self.node_id(e), self.eng.entity_line(e),
                f"matched the query by vector search (similarity {_f(s)}, rank {i + 1})", i + 1, float(s),
                numbers={"similarity": float(s), "degree": float(self.eng.degree[e])}))
        return out

    def relations(self) -> list[ContextItem]:
        """The relations section: edges at the top entities, by degree sum then weight."""
        out = []
        for i, p in enumerate(self.tr.relation_pairs):
            at = sorted((e for e in p if e in self.top_set), key=lambda e: self.entity_rank[e][0])
            names = [self.eng.name(e) for e in at]
            d, w = self.degree_sum(p), self.weight(p)
            of = " and ".join(f"{self.eng.name(e)} ({self.place(e)})" for e in at)
            out.append(ContextItem(
                "relations", "relation", self.pair_id(p), self.eng.relation_text(p),
                f"a relation of top {'entity' if len(at) == 1 else 'entities'} {of}; relations are ordered by "
                f"degree sum ({d}), then weight ({w:.3g})", i + 1, float(d), names,
                {"degree_sum": float(d), "weight": w, **self.place_numbers(at[0])}))
        return out

    def communities(self, section: str, shown: int) -> list[ContextItem]:
        """The communities used: in the reports section, or (hi_bridge) behind the bridge's key entities."""
        eng, tr = self.eng, self.tr
        keys_of: dict[int, list[int]] = {}
        for e, cis in self.picked.items():
            for ci in cis:
                keys_of.setdefault(ci, []).append(e)
        out = []
        for i, ci in enumerate(tr.communities):
            c = eng.communities[ci]
            rep = eng.reports[c.id]
            held = [eng.name(e) for e in tr.top if e in eng.member_sets[ci]]
            reason = (f"holds {len(held)} of the query's top {len(tr.top)} entities ({_names(held)}); level "
                      f"{c.level}, report rating {rep.rating:g}; communities are ordered by that count, then rating")
            if rep.source == "listing":
                reason += "; its report is a member listing (no LLM report)"
            keys = [eng.name(e) for e in keys_of.get(ci, [])] if tr.keys else []
            if keys:
                reason += f"; gave the reasoning path its key entities {_names(keys)}"
            out.append(ContextItem(
                section, "community", c.id, rep.title, reason, i + 1, float(len(held)), held,
                {"top_entities": float(len(held)), "level": float(c.level), "rating": float(rep.rating),
                 "size": float(c.size)}, shown=i < shown))
        return out

    def key_reason(self, e: int) -> tuple[str, list[str]]:
        """Why ``e`` is a key entity, and the communities (ids) that picked it."""
        m = self.eng.config.hi_top_m
        cis = self.picked.get(e, [])
        if not cis:
            return f"key entity: one of the query's {m} nearest entities ({self.place(e)})", []
        return (f"key entity: among the {m} members nearest the query of {self.label(cis)} "
                f"({self.place(e)})"), [self.cid(ci) for ci in cis]

    def path_entities(self) -> list[ContextItem]:
        """The reasoning path, vertex by vertex: key entities and the vertices between them."""
        tr = self.tr
        if not tr.path:
            return []
        name = self.eng.name
        first, via = self.key_reason(tr.path[0])
        out = [self._path_item(tr.path[0], 1, first + "; the path starts here", via)]
        for leg_no, leg in enumerate(tr.legs, 1):
            a, b = name(leg.start), name(leg.end)
            cis = list(dict.fromkeys(ci for k in (leg.start, leg.end) for ci in self.picked.get(k, [])))
            comms = [self.cid(ci) for ci in cis]
            where = f" (key entities of {self.label(cis)})" if cis else ""
            for step, v in enumerate(leg.nodes, 1):
                pos = len(out) + 1
                if v != leg.end:
                    reason = f"on the shortest path between key entities {a} and {b}{where} (step {step})"
                    out.append(self._path_item(v, pos, reason, [a, b, *comms], leg_no, step))
                    continue
                reason, ids = self.key_reason(v)
                reason += (f"; not connected to {a} in the entity graph: the path jumps to it" if leg.jump else
                           f"; reached from key entity {a} in {step} step(s)")
                out.append(self._path_item(v, pos, reason, [a, *ids], leg_no, step))
        return out

    def _path_item(self, v: int, pos: int, reason: str, via: list[str], leg: int = 0, step: int = 0) -> ContextItem:
        numbers: dict[str, float] = {**self.place_numbers(v), "leg": float(leg), "step": float(step)}
        sim = numbers.get("similarity")
        return ContextItem("bridge", "path_entity", self.node_id(v), self.eng.name(v), reason, pos, sim, via,
                           numbers)

    def bridge_lines(self) -> list[ContextItem]:
        """The bridge section's lines: the path's steps, then other relations among its entities."""
        path = self.tr.path
        steps: dict[tuple[int, int], tuple[int, int, int]] = {}
        for j, (a, b) in enumerate(zip(path, path[1:], strict=False)):
            steps.setdefault((a, b) if a < b else (b, a), (j + 1, a, b))
        out = []
        for i, p in enumerate(self.tr.bridge_pairs):
            names = [self.eng.name(p[0]), self.eng.name(p[1])]
            d, w = self.degree_sum(p), self.weight(p)
            if p in steps:
                j, a, b = steps[p]
                names = [self.eng.name(a), self.eng.name(b)]
                reason = f"step {j} of the reasoning path: {names[0]} -> {names[1]}"
            else:
                reason = (f"a relation among the reasoning path's entities {names[0]} and {names[1]}, after the "
                          f"path's steps, by degree sum ({d}), then weight ({w:.3g})")
            out.append(ContextItem("bridge", "relation", self.pair_id(p), self.eng.relation_text(p), reason, i + 1,
                                   float(d), names, {"degree_sum": float(d), "weight": w,
                                                     "path_step": float(steps[p][0] if p in steps else 0)}))
        return out

    def passages(self, shown: int) -> list[ContextItem]:
        """The ranked passages: text units of the top entities, then passages stating path relations."""
        units = set(self.tr.text_units)
        out = []
        for i, p in enumerate(self.tr.ranking):
            reason, numbers, via = self._unit_reason(p) if p in units else self._pair_reason(p)
            title = self.eng.passage_text(p).split("\n", 1)[0]
            out.append(ContextItem("passages", "passage", self.node_id(p), title, reason, i + 1, None, via,
                                   numbers, shown=i < shown))
        return out

    def _mentions(self, p: int) -> list[int]:
        return [e for e in self.tr.top if p in self.eng.ent_passage_sets[e]]

    def _unit_reason(self, p: int) -> tuple[str, dict[str, float], list[str]]:
        eng = self.eng
        ments = self._mentions(p)
        e = ments[0]                  # text units go entity by entity: the first top entity in it placed it
        shared = sum(1 for n in eng.neighbors[e] if p in eng.ent_passage_sets[n])
        names = [eng.name(x) for x in ments]
        reason = (f"a text unit of top entity {names[0]} ({self.place(e)}), where it shares {shared} of that "
                  f"entity's graph neighbours; mentions top entities {_names(names)}")
        numbers: dict[str, Any] = {**self.place_numbers(e), "shared_neighbours": float(shared),
                                   "top_entities_mentioned": float(len(ments))}
        return reason, numbers, names

    def _pair_reason(self, p: int) -> tuple[str, dict[str, float], list[str]]:
        eng = self.eng
        sets = eng.ent_passage_sets
        line = next(i for i, (a, b) in enumerate(self.tr.bridge_pairs) if p in sets[a] and p in sets[b])
        a, b = self.tr.bridge_pairs[line]
        names = [eng.name(a), eng.name(b)]
        ments = [eng.name(x) for x in self._mentions(p)]
        reason = (f"states the reasoning path's relation {names[0]} - {names[1]} (bridge line {line + 1}): both "
                  f"entities appear in it; ranked after the top entities' text units")
        if ments:
            reason += f"; mentions top entities {_names(ments)}"
        return reason, {"bridge_line": float(line + 1), "top_entities_mentioned": float(len(ments))}, \
            list(dict.fromkeys(names + ments))
