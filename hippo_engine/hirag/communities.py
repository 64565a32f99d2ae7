"""Hierarchical communities of the entity graph and their LLM-written reports (HiRAG style).

Pipeline (``build_communities``):

1. **Clustering** (:func:`hierarchical_leiden`). The entity graph is the entity nodes of the
   index graph with their entity-entity edges (fact and synonymy, with their weights). Level 0
   is igraph's Leiden (modularity objective) on the whole entity graph; every community larger
   than ``max_cluster_size`` is clustered again, one level down, on its induced subgraph, until
   it is small enough or cannot be split. igraph's Leiden draws from a process-wide random
   generator; each call here gets a private ``random.Random`` seeded from the configured seed
   and (below level 0) the parent's member set, and the default generator is put back after
   the call, so results are deterministic per seed and no global random state is touched.
   A sub-clustering depends only on its parent's member set, so an unchanged community keeps
   the same children after an insert elsewhere.
2. **Annotation**. Every :class:`Community` records its level, member entities, member edges
   (entity pairs inside it), source passages (passages whose triples mention a member, the
   ones mentioning most members first), parent and children. Its id is
   ``"community-" + md5(sorted member ids)``: the member set identifies it.
3. **Reports** (:func:`write_reports`), bottom-up (deepest level first, one
   ``llm.generate_many`` batch per level). The prompt (``prompts/community_report.json``)
   shows the community's entities, relations and passages; when they exceed the context
   budget and the community has children, the children's reports are packed instead of the
   raw members they cover. The JSON reply (title, summary, findings, rating) is parsed with
   :func:`hippo_engine.text.parse_json_lenient`; a failed call or malformed reply is retried
   once (a malformed one with a correction turn), then replaced by a plain listing of the
   members (``source="fallback"``) with a warning.
4. **Persistence** in the index's SQLite file: tables ``communities`` and
   ``community_reports`` (JSON columns, no pickle) and a fourth embedding store
   ``store_community`` holding each community's report text and vector.
5. **Incremental reuse**. Reports are keyed by the member-set hash: after an insert or delete
   the communities are recomputed, and only communities whose member set is new get a new
   report; all others reuse the stored one (and its vector).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from hippo_engine.index.graph import KIND_CONTEXT, KIND_SYNONYMY, GraphData
from hippo_engine.llm.base import LLMClient, LLMResponse
from hippo_engine.prompts import load_json_prompt
from hippo_engine.store.sqlite import IndexDB, SQLiteEmbeddingStore
from hippo_engine.text import mdhash_id, parse_json_lenient

logger = logging.getLogger(__name__)

COMMUNITY_PREFIX = "community-"
REPORT_PROMPT = "community_report.json"
SOURCE_LLM, SOURCE_FALLBACK, SOURCE_LISTING = "llm", "fallback", "listing"
_META_VERSION = "communities_version"
_META_PARAMS = "communities_params"

TokenCounter = Callable[[str], int]


def whitespace_tokens(text: str) -> int:
    """Token count as whitespace-separated words (the fallback counter)."""
    return len(text.split())


# ============================================================================ ids
def member_key(member_ids: Iterable[str]) -> str:
    """md5 of the sorted member ids, one per line: identifies a member set."""
    return hashlib.md5("\n".join(sorted(member_ids)).encode("utf-8")).hexdigest()


def community_id(member_ids: Iterable[str]) -> str:
    """``"community-" + member_key``."""
    return COMMUNITY_PREFIX + member_key(member_ids)


# ============================================================================ data
@dataclass
class Community:
    """One community of the hierarchy. Ids are graph node ids (``entity-...``/``chunk-...``)."""

    id: str
    level: int
    entities: list[str]                          # member entity ids, sorted
    parent: str | None = None
    children: list[str] = field(default_factory=list)
    edges: list[tuple[str, str]] = field(default_factory=list)   # (a, b), a < b, sorted
    passages: list[str] = field(default_factory=list)            # most members mentioned first

    @property
    def key(self) -> str:
        """The member-set hash (report reuse key)."""
        return self.id[len(COMMUNITY_PREFIX):]

    @property
    def size(self) -> int:
        return len(self.entities)

    def to_json(self) -> dict:
        d = asdict(self)
        d["edges"] = [list(e) for e in self.edges]
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Community:
        return cls(id=d["id"], level=int(d["level"]), entities=list(d["entities"]), parent=d.get("parent"),
                   children=list(d.get("children") or []), edges=[tuple(e) for e in d.get("edges") or []],
                   passages=list(d.get("passages") or []))


@dataclass
class CommunityReport:
    """A community report: what the LLM wrote, or the member listing that replaced it."""

    title: str
    summary: str
    findings: list[dict] = field(default_factory=list)   # [{"summary": str, "explanation": str}]
    rating: float = 0.0
    source: str = SOURCE_LLM          # "llm" | "fallback" (LLM failed twice) | "listing" (not asked)
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    attempts: int = 0

    def text(self) -> str:
        """Markdown rendering: ``# title``, summary, then ``## finding`` + explanation blocks."""
        parts = [f"# {self.title}", self.summary]
        for f in self.findings:
            s, e = f.get("summary", ""), f.get("explanation", "")
            parts.append(f"## {s}\n{e}".rstrip())
        return "\n\n".join(p for p in parts if p)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CommunityReport:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


# ============================================================================ clustering
_RNG_LOCK = threading.Lock()
#: Leiden iterations per call. A negative value ("until stable") can cycle forever on some
#: subgraphs (seen on MuSiQue), so a fixed count is used (igraph and graspologic use 2).
LEIDEN_ITERATIONS = 10


@contextlib.contextmanager
def seeded_igraph_rng(seed: int | str) -> Iterator[None]:
    """Run igraph's random algorithms on a private ``random.Random(seed)``.

    igraph draws from one process-wide generator (by default the ``random`` module). This
    installs a private generator for the duration of the block and puts the module back
    afterwards, so the global ``random`` state is neither used nor changed. A lock keeps
    concurrent callers from interleaving.
    """
    import igraph as ig

    with _RNG_LOCK:
        ig.set_random_number_generator(random.Random(seed))
        try:
            yield
        finally:
            ig.set_random_number_generator(random)


def entity_edges(graph: GraphData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, weight) of the edges between two entity nodes (indices < num_entities)."""
    m = (graph.src < graph.num_entities) & (graph.dst < graph.num_entities)
    return graph.src[m], graph.dst[m], graph.weight[m]


def entity_igraph(graph: GraphData):
    """The entity graph as an ``igraph.Graph`` (vertex ``name``, edge ``weight``), built from the
    stored ``GraphData`` arrays, so it works for any graph backend that can give them."""
    import igraph as ig

    src, dst, w = entity_edges(graph)
    g = ig.Graph(n=int(graph.num_entities), edges=np.column_stack([src, dst]).tolist(), directed=False)
    g.vs["name"] = list(graph.node_ids[: graph.num_entities])
    g.es["weight"] = w.tolist()
    return g


def _leiden_groups(g, seed: int | str) -> list[np.ndarray]:
    """Leiden (modularity, weighted, ``LEIDEN_ITERATIONS`` iterations) on ``g``; groups of vertex indices,
    each sorted, ordered by their smallest vertex."""
    if g.vcount() == 0:
        return []
    weights = "weight" if g.ecount() and "weight" in g.es.attributes() else None
    with seeded_igraph_rng(seed):
        cl = g.community_leiden(objective_function="modularity", weights=weights, n_iterations=LEIDEN_ITERATIONS)
    memb = np.asarray(cl.membership)
    groups = [np.flatnonzero(memb == c) for c in np.unique(memb)]
    groups.sort(key=lambda a: int(a[0]))
    return groups


def hierarchical_leiden(g, max_cluster_size: int = 10, seed: int = 0, min_size: int = 2,
                        max_levels: int = 8) -> list[tuple[int, np.ndarray, int]]:
    """Hierarchical Leiden clustering of ``g`` (an ``igraph.Graph`` with vertex ``name``).

    Returns ``[(level, member vertex indices (sorted), parent position or -1)]`` in the order
    the communities were found (level 0 first, children right after their parent is split).
    Communities smaller than ``min_size`` are not returned (their vertices stay without a
    community at that level). A community larger than ``max_cluster_size`` is clustered again
    on its induced subgraph, with a seed derived from ``seed`` and its member names; if that
    yields one group it stays a leaf.
    """
    names = g.vs["name"] if g.vcount() else []
    out: list[tuple[int, np.ndarray, int]] = []
    stack: list[tuple[np.ndarray, int, int, int | str]] = [(np.arange(g.vcount()), 0, -1, f"{seed}:root")]
    while stack:
        members, level, parent, rng_seed = stack.pop(0)
        sub = g if level == 0 else g.induced_subgraph(members.tolist())
        groups = [members[grp] for grp in _leiden_groups(sub, rng_seed)]
        if level > 0 and len(groups) <= 1:
            continue  # cannot split: the parent stays a leaf
        for grp in groups:
            if len(grp) < min_size:
                continue
            pos = len(out)
            out.append((level, grp, parent))
            if len(grp) > max_cluster_size and level + 1 < max_levels:
                stack.append((grp, level + 1, pos, f"{seed}:{member_key(names[i] for i in grp)}"))
    return out


def cluster_entities(graph: GraphData, max_cluster_size: int = 10, seed: int = 0, min_size: int = 2,
                     max_levels: int = 8) -> list[Community]:
    """Cluster the entity graph of ``graph`` hierarchically and annotate every community with its
    member edges and source passages. Sorted by (level, id); deterministic for a seed."""
    g = entity_igraph(graph)
    raw = hierarchical_leiden(g, max_cluster_size, seed, min_size, max_levels)
    ids = graph.node_ids
    comms: list[Community] = []
    for level, members, _parent in raw:
        ents = sorted(str(ids[i]) for i in members)
        comms.append(Community(id=community_id(ents), level=level, entities=ents))
    for c, (_, _, parent) in zip(comms, raw, strict=False):
        if parent >= 0:
            c.parent = comms[parent].id
            comms[parent].children.append(c.id)
    for c in comms:
        c.children.sort()
    _annotate(comms, raw, graph)
    comms.sort(key=lambda c: (c.level, c.id))
    return comms


def _annotate(comms: list[Community], raw: list[tuple[int, np.ndarray, int]], graph: GraphData) -> None:
    """Fill ``edges`` (entity pairs inside each community) and ``passages`` (by members mentioned)."""
    ids = graph.node_ids
    n_ent = graph.num_entities
    src, dst, _ = entity_edges(graph)
    # passages of each entity: context edges entity-passage
    ctx = (graph.kinds & KIND_CONTEXT) > 0
    a, b = graph.src[ctx], graph.dst[ctx]
    ent = np.where(a < n_ent, a, b)
    psg = np.where(a < n_ent, b, a)
    by_ent: dict[int, list[int]] = {}
    for e, p in zip(ent.tolist(), psg.tolist(), strict=False):
        by_ent.setdefault(e, []).append(p)
    levels = sorted({lvl for lvl, _, _ in raw})
    for lvl in levels:
        lab = np.full(n_ent, -1, dtype=np.int64)
        for pos, (l2, members, _) in enumerate(raw):
            if l2 == lvl:
                lab[members] = pos
        same = (lab[src] == lab[dst]) & (lab[src] >= 0)
        for s, d, pos in zip(src[same].tolist(), dst[same].tolist(), lab[src[same]].tolist(), strict=False):
            x, y = str(ids[s]), str(ids[d])
            comms[pos].edges.append((x, y) if x < y else (y, x))
    for c, (_, members, _) in zip(comms, raw, strict=False):
        c.edges.sort()
        cnt = Counter(p for m in members.tolist() for p in by_ent.get(m, ()))
        c.passages = [str(ids[p]) for p, _ in sorted(cnt.items(), key=lambda t: (-t[1], str(ids[t[0]])))]


def communities_by_level(comms: Sequence[Community]) -> dict[int, int]:
    """{level: number of communities}."""
    return dict(sorted(Counter(c.level for c in comms).items()))


# ============================================================================ report inputs
class ReportInputs:
    """What report prompts are built from: entity names and degrees, the relation triples of
    each entity pair, and passage texts. Built once from an index's content."""

    def __init__(self, graph: GraphData, entity_text: Callable[[str], str], passage_text: Callable[[str], str],
                 passage_triples: Mapping[str, Sequence[tuple[str, str, str]]]):
        self.graph = graph
        self.entity_text = entity_text
        self.passage_text = passage_text
        src, dst, w = entity_edges(graph)
        deg = np.bincount(np.concatenate([src, dst]), minlength=graph.num_entities) if len(src) else \
            np.zeros(graph.num_entities, dtype=np.int64)
        self.degree = {str(graph.node_ids[i]): int(deg[i]) for i in range(graph.num_entities)}
        ids = graph.node_ids
        self.edge_weight: dict[tuple[str, str], float] = {}
        self.edge_kinds: dict[tuple[str, str], int] = {}
        kinds = graph.kinds[(graph.src < graph.num_entities) & (graph.dst < graph.num_entities)]
        for s, d, ww, k in zip(src.tolist(), dst.tolist(), w.tolist(), kinds.tolist(), strict=False):
            x, y = str(ids[s]), str(ids[d])
            key = (x, y) if x < y else (y, x)
            self.edge_weight[key] = ww
            self.edge_kinds[key] = k
        self.pair_triples: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
        for pid in sorted(passage_triples):
            for t in passage_triples[pid]:
                x, y = mdhash_id(t[0], "entity-"), mdhash_id(t[2], "entity-")
                if x == y:
                    continue
                key = (x, y) if x < y else (y, x)
                lst = self.pair_triples.setdefault(key, [])
                if t not in lst:
                    lst.append(t)

    def name(self, eid: str) -> str:
        try:
            return self.entity_text(eid)
        except KeyError:
            return eid

    def relation_lines(self, pair: tuple[str, str]) -> list[str]:
        """``subject | predicate | object`` for each triple linking the pair; a synonymy-only
        pair reads ``a | similar to | b``, another pair without a stored triple
        ``a | related to | b``."""
        triples = self.pair_triples.get(pair)
        if triples:
            return [f"{s} | {p} | {o}" for s, p, o in triples]
        if self.edge_kinds.get(pair, 0) & KIND_SYNONYMY:
            return [f"{self.name(pair[0])} | similar to | {self.name(pair[1])}"]
        if pair in self.edge_kinds:
            return [f"{self.name(pair[0])} | related to | {self.name(pair[1])}"]
        return []


def _fit(lines: Sequence[str], count: TokenCounter, budget: int) -> list[str]:
    """The longest prefix of ``lines`` whose total token count is within ``budget``."""
    out, used = [], 0
    for ln in lines:
        n = count(ln) + 1
        if used + n > budget:
            break
        out.append(ln)
        used += n
    return out


def _excerpt(text: str, max_words: int) -> str:
    words = text.split()
    return " ".join(words[:max_words]) + (" ..." if len(words) > max_words else "")


def community_context(c: Community, inputs: ReportInputs, child_reports: Mapping[str, CommunityReport],
                      children: Mapping[str, Community], budget: int, count: TokenCounter = whitespace_tokens,
                      passage_words: int = 80) -> tuple[str, bool]:
    """The report prompt's context for ``c`` within ``budget`` tokens.

    Raw form: entities (by degree), relations (by edge weight), passage excerpts (most members
    first). When the raw entities and relations do not fit and children have reports, the
    children's reports come first (up to half the budget) and the raw part keeps only what they
    do not cover: entities outside any reported child and relations between children.
    Returns (context text, whether child reports were used).
    """
    ents = sorted(c.entities, key=lambda e: (-inputs.degree.get(e, 0), inputs.name(e)))
    pairs = sorted(c.edges, key=lambda p: (-inputs.edge_weight.get(p, 0.0), p))
    ent_lines = [f"- {inputs.name(e)}" for e in ents]
    rel_lines = [ln for p in pairs for ln in inputs.relation_lines(p)]
    raw_tokens = sum(count(x) + 1 for x in ent_lines + rel_lines)
    reported = [children[k] for k in c.children if k in child_reports and k in children]
    used_children = raw_tokens > budget * 0.6 and bool(reported)
    sections: list[str] = []
    remaining = budget
    if used_children:
        blocks = []
        for ch in sorted(reported, key=lambda x: (-x.size, x.id)):
            r = child_reports[ch.id]
            finds = "; ".join(f.get("summary", "") for f in r.findings if f.get("summary"))
            blocks.append(f"- {r.title}: {r.summary}" + (f" Findings: {finds}" if finds else ""))
        blocks = _fit(blocks, count, budget // 2)
        if blocks:
            sections.append("Sub-community reports:\n" + "\n".join(blocks))
            remaining -= sum(count(b) + 1 for b in blocks)
        covered: dict[str, str] = {}
        for ch in reported[: len(blocks)]:
            for e in ch.entities:
                covered[e] = ch.id
        ent_lines = [f"- {inputs.name(e)}" for e in ents if e not in covered]
        rel_lines = [ln for p in pairs if covered.get(p[0]) is None or covered.get(p[0]) != covered.get(p[1])
                     for ln in inputs.relation_lines(p)]
    ent_fit = _fit(ent_lines, count, max(remaining // 4, 1))
    rel_fit = _fit(rel_lines, count, max((remaining - sum(count(x) + 1 for x in ent_fit)) * 2 // 3, 1))
    left = remaining - sum(count(x) + 1 for x in ent_fit + rel_fit)
    psg_lines = []
    for pid in c.passages:
        try:
            psg_lines.append(f"- {_excerpt(inputs.passage_text(pid), passage_words)}")
        except KeyError:
            continue
        if len(psg_lines) >= 50:
            break
    psg_fit = _fit(psg_lines, count, max(left, 0))
    if ent_fit:
        sections.append("Entities:\n" + "\n".join(ent_fit))
    if rel_fit:
        sections.append("Relations (subject | predicate | object):\n" + "\n".join(rel_fit))
    if psg_fit:
        sections.append("Passages:\n" + "\n".join(psg_fit))
    return "\n\n".join(sections), used_children


# ============================================================================ prompts and parsing
def report_prompt() -> dict:
    """The report prompt file (system text, user template, one example, retry instruction)."""
    p = load_json_prompt(REPORT_PROMPT)
    for k in ("system", "user_template", "retry_instruction"):
        if not isinstance(p.get(k), str):
            raise ValueError(f"prompts/{REPORT_PROMPT} needs a string field {k!r}")
    return p


def report_messages(context: str, prompt: dict | None = None) -> list[dict]:
    """Chat messages asking for one community's report."""
    p = prompt or report_prompt()
    msgs = [{"role": "system", "content": p["system"]}]
    for ex in p.get("examples") or []:
        msgs.append({"role": "user", "content": p["user_template"].format(context=ex["context"])})
        msgs.append({"role": "assistant", "content": json.dumps(ex["report"], ensure_ascii=False)})
    msgs.append({"role": "user", "content": p["user_template"].format(context=context)})
    return msgs


def _clean_str(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return " ".join(_clean_str(x) for x in v).strip()
    if isinstance(v, dict):
        return " ".join(_clean_str(x) for x in v.values()).strip()
    return str(v).strip()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_SALVAGE_SUFFIXES = ('"}', '"}]}', '"}], "rating": 0}', "]}", "}")


def collapse_repeats(text: str) -> str:
    """Drop sentences that already occurred in ``text`` (small models loop under greedy
    decoding and repeat one or a few sentences until the token limit)."""
    seen, out = set(), []
    for sent in _SENTENCE_END.split(text.strip()):
        key = " ".join(sent.lower().split())
        if key and key not in seen:
            seen.add(key)
            out.append(sent.strip())
    return " ".join(out)


def _report_fields(data: Any) -> dict:
    """Validate and normalise a parsed report (see :func:`parse_report`)."""
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict):
        data = data[0]
    if not isinstance(data, dict):
        raise ValueError("the report is not a JSON object")
    data = {str(k).lower(): v for k, v in data.items()}
    title, summary = _clean_str(data.get("title")), collapse_repeats(_clean_str(data.get("summary")))
    if not title or not summary:
        raise ValueError("the report lacks a title or a summary")
    findings = []
    raw = data.get("findings") or []
    if isinstance(raw, dict):
        raw = [raw]
    if isinstance(raw, list):
        for f in raw:
            if isinstance(f, dict):
                f = {str(k).lower(): v for k, v in f.items()}
                s, e = _clean_str(f.get("summary")), collapse_repeats(_clean_str(f.get("explanation")))
            else:
                s, e = _clean_str(f), ""
            if (s or e) and (s, e) not in {(x["summary"], x["explanation"]) for x in findings}:
                findings.append({"summary": s, "explanation": e})
    try:
        rating = float(data.get("rating", 0.0))
        if not np.isfinite(rating):
            rating = 0.0
    except (TypeError, ValueError):
        rating = 0.0
    return {"title": title, "summary": summary, "findings": findings, "rating": min(max(rating, 0.0), 10.0)}


def parse_report(text: str) -> dict:
    """Validate a report reply: a JSON object with a non-empty ``title`` and ``summary``;
    ``findings`` becomes a list of ``{"summary", "explanation"}`` (strings accepted),
    ``rating`` a number clipped to [0, 10] (0 when missing or not a number). Repeated
    sentences are dropped. A reply cut off inside a string (a looping model hitting the token
    limit) is closed and kept when title and summary survive. Raises ``ValueError`` when
    malformed."""
    try:
        return _report_fields(parse_json_lenient(text))
    except ValueError as e:
        first = e
    body = (text or "").rstrip().rstrip("\\")
    best: dict | None = None
    for suffix in _SALVAGE_SUFFIXES:   # keep the closing that saves the most text
        try:
            cand = _report_fields(parse_json_lenient(body + suffix))
        except ValueError:
            continue
        if best is None or len(json.dumps(cand)) > len(json.dumps(best)):
            best = cand
    if best is None:
        raise first
    best["summary"] = _drop_unfinished(best["summary"])
    for f in best["findings"]:
        f["explanation"] = _drop_unfinished(f["explanation"])
    return best


def _drop_unfinished(text: str) -> str:
    """Cut a trailing unfinished sentence (text cut off by the token limit)."""
    if not text or text[-1] in ".!?":
        return text
    cut = max(text.rfind(". "), text.rfind("! "), text.rfind("? "))
    return text[: cut + 1] if cut > 0 else text


def listing_report(c: Community, inputs: ReportInputs, source: str, max_items: int = 12) -> CommunityReport:
    """A report that just lists the community's members and relations (no LLM)."""
    ents = sorted(c.entities, key=lambda e: (-inputs.degree.get(e, 0), inputs.name(e)))
    names = [inputs.name(e) for e in ents]
    title = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    pairs = sorted(c.edges, key=lambda p: (-inputs.edge_weight.get(p, 0.0), p))
    rels = [ln for p in pairs for ln in inputs.relation_lines(p)][:max_items]
    summary = f"Community of {len(names)} entities: " + ", ".join(names[:max_items]) + \
        (", ..." if len(names) > max_items else "") + "."
    findings = [{"summary": r, "explanation": ""} for r in rels]
    return CommunityReport(title=title or c.id, summary=summary, findings=findings, rating=0.0, source=source)


# ============================================================================ report writing
@dataclass
class ReportStats:
    """Counters of one report-writing run."""

    llm_calls: int = 0
    retries: int = 0
    written: int = 0          # reports written by the LLM
    fallbacks: int = 0        # LLM failed twice: member listing
    listings: int = 0         # not sent to the LLM (``max_llm_reports`` reached): member listing
    reused: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    children_packed: int = 0
    per_level: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _bottom_up(comms: Sequence[Community]) -> list[int]:
    return sorted({c.level for c in comms}, reverse=True)


def write_reports(comms: Sequence[Community], inputs: ReportInputs, llm: LLMClient | Callable[[], LLMClient] | None,
                  existing: Mapping[str, CommunityReport], *, budget: int = 3000,
                  count: TokenCounter = whitespace_tokens, max_new_tokens: int = 768,
                  temperature: float | None = 0.0, max_llm_reports: int | None = None,
                  show_progress: bool = False) -> tuple[dict[str, CommunityReport], ReportStats]:
    """Reports for ``comms`` (by community id), bottom-up.

    A community whose member key is in ``existing`` (``{member_key: report}``) reuses that
    report without an LLM call. Others are written by ``llm`` (an ``LLMClient`` or a zero-arg
    factory, called only if some report is needed), one ``generate_many`` batch per level;
    at most ``max_llm_reports`` are sent to the LLM (None: no limit), the rest get a member
    listing. A failed or malformed reply is retried once, then replaced by a listing.
    """
    stats = ReportStats()
    reports: dict[str, CommunityReport] = {}
    by_id = {c.id: c for c in comms}
    prompt = None
    client: LLMClient | None = None
    left = max_llm_reports
    t_all = time.perf_counter()
    for level in _bottom_up(comms):
        level_comms = [c for c in comms if c.level == level]
        todo = []
        for c in level_comms:
            if c.key in existing:
                reports[c.id] = existing[c.key]
                stats.reused += 1
            else:
                todo.append(c)
        ask = todo if left is None else todo[:max(left, 0)]
        for c in todo[len(ask):]:
            reports[c.id] = listing_report(c, inputs, SOURCE_LISTING)
            stats.listings += 1
        if left is not None:
            left -= len(ask)
        lvl = {"communities": len(level_comms), "asked": len(ask), "reused": len(level_comms) - len(todo),
               "seconds": 0.0, "prompt_tokens": 0, "completion_tokens": 0}
        stats.per_level[level] = lvl
        if not ask:
            continue
        if client is None:
            client = llm() if callable(llm) and not isinstance(llm, LLMClient) else llm
            if client is None:
                raise ValueError("reports are needed but no LLM was given")
            prompt = report_prompt()
        contexts = []
        for c in ask:
            ctx, used = community_context(c, inputs, reports, by_id, budget, count)
            stats.children_packed += int(used)
            contexts.append(ctx)
        msgs = [report_messages(ctx, prompt) for ctx in contexts]
        t0 = time.perf_counter()
        first = client.generate_many(msgs, max_new_tokens=max_new_tokens, temperature=temperature,
                                     show_progress=show_progress, desc=f"Community reports (level {level})")
        stats.llm_calls += len(ask)
        parsed: list[dict | None] = [None] * len(ask)
        retry_idx, retry_msgs = [], []
        for i, res in enumerate(first):
            _count_tokens(res, stats, lvl)
            if isinstance(res, LLMResponse):
                try:
                    parsed[i] = parse_report(res.text)
                    continue
                except ValueError as e:
                    logger.info("community %s: malformed report (%s); retrying once", ask[i].id, e)
                    retry_msgs.append(msgs[i] + [{"role": "assistant", "content": res.text},
                                                 {"role": "user", "content": prompt["retry_instruction"]}])
            else:
                logger.info("community %s: report call failed (%s); retrying once", ask[i].id, res)
                retry_msgs.append(msgs[i])
            retry_idx.append(i)
        second = []
        if retry_msgs:
            second = client.generate_many(retry_msgs, max_new_tokens=max_new_tokens, temperature=temperature,
                                          show_progress=show_progress, desc=f"Report retries (level {level})")
            stats.llm_calls += len(retry_msgs)
            stats.retries += len(retry_msgs)
        for i, res in zip(retry_idx, second, strict=False):
            _count_tokens(res, stats, lvl)
            if isinstance(res, LLMResponse):
                try:
                    parsed[i] = parse_report(res.text)
                except ValueError as e:
                    logger.warning("community %s: report still malformed after a retry (%s); using a member "
                                   "listing", ask[i].id, e)
            else:
                logger.warning("community %s: report call failed twice (%s); using a member listing",
                               ask[i].id, res)
        dt = time.perf_counter() - t0
        lvl["seconds"] = dt
        model = getattr(client, "model_name", "")
        for i, c in enumerate(ask):
            res1 = first[i]
            attempts = 2 if i in retry_idx else 1
            if parsed[i] is None:
                reports[c.id] = listing_report(c, inputs, SOURCE_FALLBACK)
                reports[c.id].attempts = attempts
                stats.fallbacks += 1
                continue
            p_tok = res1.prompt_tokens if isinstance(res1, LLMResponse) else 0
            c_tok = res1.completion_tokens if isinstance(res1, LLMResponse) else 0
            if i in retry_idx:
                res2 = second[retry_idx.index(i)]
                if isinstance(res2, LLMResponse):
                    p_tok += res2.prompt_tokens
                    c_tok += res2.completion_tokens
            reports[c.id] = CommunityReport(**parsed[i], source=SOURCE_LLM, model=model, prompt_tokens=p_tok,
                                            completion_tokens=c_tok, seconds=dt / len(ask), attempts=attempts)
            stats.written += 1
        logger.info("community reports, level %d: %d written by the LLM in %.1fs, %d reused", level,
                    sum(1 for c in ask if reports[c.id].source == SOURCE_LLM), dt, lvl["reused"])
    stats.seconds = time.perf_counter() - t_all
    if stats.fallbacks:
        logger.warning("%d community report(s) fell back to a member listing after a failed retry", stats.fallbacks)
    return reports, stats


def _count_tokens(res: Any, stats: ReportStats, lvl: dict) -> None:
    if isinstance(res, LLMResponse):
        stats.prompt_tokens += res.prompt_tokens
        stats.completion_tokens += res.completion_tokens
        lvl["prompt_tokens"] += res.prompt_tokens
        lvl["completion_tokens"] += res.completion_tokens


# ============================================================================ persistence
class CommunityVectorStore(SQLiteEmbeddingStore):
    """The fourth embedding store: each community's report text and vector, keyed by community
    id, in table ``store_community`` of the index's SQLite file."""

    def __init__(self, db: IndexDB, dim: int):  # noqa: D107 - the parent's namespace check is bypassed
        self.db, self.namespace, self.dim = db, "community", dim
        self.table = "store_community"
        db.conn.execute("CREATE TABLE IF NOT EXISTS store_community (id TEXT PRIMARY KEY, content TEXT NOT NULL,"
                        " vec BLOB NOT NULL)")
        self.reload()


class CommunityDB:
    """The ``communities`` and ``community_reports`` tables of an index's SQLite file."""

    def __init__(self, db: IndexDB):
        self.db = db
        c = db.conn
        c.execute("CREATE TABLE IF NOT EXISTS communities (id TEXT PRIMARY KEY, level INTEGER NOT NULL,"
                  " parent TEXT, data TEXT NOT NULL)")
        c.execute("CREATE TABLE IF NOT EXISTS community_reports (member_key TEXT PRIMARY KEY, report TEXT NOT NULL,"
                  " source TEXT NOT NULL)")

    def load_communities(self) -> list[Community]:
        rows = self.db.conn.execute("SELECT data FROM communities ORDER BY level, id").fetchall()
        return [Community.from_json(json.loads(r[0])) for r in rows]

    def load_reports(self) -> dict[str, CommunityReport]:
        """{member_key: report}."""
        return {k: CommunityReport.from_json(json.loads(r))
                for k, r in self.db.conn.execute("SELECT member_key, report FROM community_reports")}

    def replace(self, comms: Sequence[Community], reports: Mapping[str, CommunityReport]) -> None:
        """Replace all communities; keep exactly the reports of the current member sets.
        Call inside ``db.transaction()``."""
        c = self.db.conn
        c.execute("DELETE FROM communities")
        c.executemany("INSERT INTO communities VALUES (?, ?, ?, ?)",
                      [(x.id, x.level, x.parent, json.dumps(x.to_json(), ensure_ascii=False)) for x in comms])
        keep = {x.key for x in comms}
        stored = {r[0] for r in c.execute("SELECT member_key FROM community_reports")}
        c.executemany("DELETE FROM community_reports WHERE member_key=?", [(k,) for k in sorted(stored - keep)])
        c.executemany("INSERT OR REPLACE INTO community_reports VALUES (?, ?, ?)",
                      [(x.key, json.dumps(reports[x.id].to_json(), ensure_ascii=False), reports[x.id].source)
                       for x in comms if x.id in reports])


def _params(config) -> str:
    return json.dumps({"max_cluster_size": config.max_cluster_size, "seed": config.community_seed,
                       "min_size": config.community_min_size, "max_levels": config.community_max_levels},
                      sort_keys=True)


def communities_state(index, config) -> str:
    """``"missing"`` (never built), ``"stale"`` (index or clustering settings changed since) or
    ``"current"``."""
    v = index.db.get_meta(_META_VERSION)
    if v is None:
        return "missing"
    if v != index.version or index.db.get_meta(_META_PARAMS) != _params(config):
        return "stale"
    return "current"


@dataclass
class CommunitySet:
    """Communities of one index version with their reports and report vectors."""

    communities: list[Community]
    reports: dict[str, CommunityReport]     # by community id
    store: CommunityVectorStore

    @property
    def by_id(self) -> dict[str, Community]:
        return {c.id: c for c in self.communities}

    def matrix(self) -> np.ndarray:
        """Report vectors, rows in the order of ``communities``."""
        if not self.communities:
            return np.zeros((0, self.store.dim), np.float32)
        return self.store.matrix[[self.store.row(c.id) for c in self.communities]]

    def levels(self) -> dict[int, int]:
        return communities_by_level(self.communities)


def load_communities(index) -> CommunitySet:
    """Read the stored communities, reports and vectors of ``index`` (no staleness check)."""
    cdb = CommunityDB(index.db)
    comms = cdb.load_communities()
    by_key = cdb.load_reports()
    reports = {c.id: by_key[c.key] for c in comms if c.key in by_key}
    dim = index.stores["passage"].dim
    return CommunitySet(comms, reports, CommunityVectorStore(index.db, dim))


def build_communities(index, config, llm: LLMClient | Callable[[], LLMClient] | None, *,
                      count: TokenCounter = whitespace_tokens, max_llm_reports: int | None = None,
                      show_progress: bool | None = None) -> dict:
    """(Re)compute the communities of ``index`` and bring reports and vectors up to date.

    Only communities whose member set has no stored report are sent to the LLM; everything
    else is reused. Writes everything in one transaction. Returns a summary: communities per
    level, report statistics (LLM calls, tokens, seconds, reused, fallbacks) and timings.
    """
    show = config.show_progress if show_progress is None else show_progress
    t0 = time.perf_counter()
    graph = index.graph
    comms = cluster_entities(graph, config.max_cluster_size, config.community_seed, config.community_min_size,
                             config.community_max_levels)
    t1 = time.perf_counter()
    cdb = CommunityDB(index.db)
    existing = cdb.load_reports()
    stores = index.stores
    inputs = ReportInputs(graph, stores["entity"].text, stores["passage"].text, index.passage_triples)
    reports, stats = write_reports(comms, inputs, llm, existing, budget=config.community_report_context_tokens,
                                   count=count, max_new_tokens=config.community_report_max_new_tokens,
                                   temperature=config.temperature, max_llm_reports=max_llm_reports,
                                   show_progress=show)
    t2 = time.perf_counter()
    vstore = CommunityVectorStore(index.db, stores["passage"].dim)
    texts = {c.id: reports[c.id].text() for c in comms}
    need = [c.id for c in comms if c.id not in vstore or vstore.text(c.id) != texts[c.id]]
    vecs = index.encoder.encode([texts[i] for i in need], show_progress=show,
                                desc="Embedding community reports") if need else np.zeros((0, vstore.dim), np.float32)
    t3 = time.perf_counter()
    live = {c.id for c in comms}
    try:
        with index.db.transaction():
            cdb.replace(comms, reports)
            vstore.delete([i for i in vstore.ids if i not in live])
            vstore.upsert(need, [texts[i] for i in need], vecs)
            index.db.set_meta(_META_VERSION, index.version)
            index.db.set_meta(_META_PARAMS, _params(config))
    except BaseException:
        vstore.reload()  # the transaction rolled back: drop the in-memory changes too
        raise
    summary = {"communities": len(comms), "levels": communities_by_level(comms),
               "reports": stats.to_dict(), "embedded": len(need),
               "timings": {"cluster": t1 - t0, "reports": t2 - t1, "embed": t3 - t2, "total": time.perf_counter() - t0}}
    logger.info("communities: %d (%s per level); %d report(s) by the LLM (%d calls), %d reused, %d fallback, "
                "%d listing; %.1fs", len(comms), summary["levels"], stats.written, stats.llm_calls, stats.reused,
                stats.fallbacks, stats.listings, summary["timings"]["total"])
    return summary
