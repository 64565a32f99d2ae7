"""``hippo-engine explain``: why a query's top passages ranked where they did, as a compact tree per
passage (or, with ``--json``, each :class:`~hippo_engine.datatypes.Explanation`'s ``to_dict()``).
With ``--mode`` a hi_* mode, what its context holds instead, section by section: each item (entity,
relation, community, path entity, passage) with why it was chosen (``--json``: each
:class:`~hippo_engine.datatypes.ContextItem`'s ``to_dict()``).

Per passage: its rank, score and title and how it was placed (the graph walk, its score, a dense
rule, the dense fallback) in a reader's words, what the score is made of (and, on a line of its own,
the same with the settings' names); the seed entities with their shares of the score, the dense prior and the check; the
top walks from seeds to the passage with the facts or sentences on their edges. Above the passages,
once per query: the candidate facts the recognition filter kept or dropped. Light to import (the
engine loads when the command runs)."""
from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from typing import Any

from hippo_engine.cli import common
from hippo_engine.datatypes import SECTION_TITLES
from hippo_engine.modes import mode_specs

#: seeds, candidate facts and edge texts printed (the JSON has them all)
SEEDS_SHOWN = 5
FACTS_SHOWN = 6
TEXT_WIDTH = 110
#: items printed per context section in a hi_* mode (passages: all ranked, up to --top)
ITEMS_SHOWN = 5


def explain_modes() -> tuple[str, ...]:
    """The modes ``explain`` takes: those whose spec is ``explainable`` (``naive`` ranks by the dense score
    alone: nothing to explain)."""
    return tuple(s.name for s in mode_specs() if s.explainable)


def _clip(text: str, width: int = TEXT_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3].rstrip() + "..."


def _pct(x: float) -> str:
    return f"{100 * x:5.1f}%"


def _fact(f: Any) -> str:
    return "(" + ", ".join(str(x) for x in f) + ")" if isinstance(f, (list, tuple)) else str(f)


def query_lines(exp) -> list[str]:
    """What is common to the query's passages: the candidate facts kept or dropped, the fallback."""
    cands = exp.candidate_facts
    kept = sum(1 for c in cands if c.get("kept"))
    out = [f"query: {exp.query}"]
    if cands:
        out.append(f"candidate facts: {len(cands)} ({kept} kept, {len(cands) - kept} dropped by the filter)")
        for c in cands[:FACTS_SHOWN]:
            out.append(f"  {'kept   ' if c.get('kept') else 'dropped'} {c.get('score', 0.0):.2f}  "
                       f"{_clip(_fact(c.get('fact')), TEXT_WIDTH - 16)}")
        if len(cands) > FACTS_SHOWN:
            out.append(f"  ... {len(cands) - FACTS_SHOWN} more (--json)")
    if exp.used_fallback:
        out.append(f"dense fallback: {exp.fallback_reason or 'no graph walk'}")
    return out


def _placement(exp) -> str:
    """How the passage got its rank, in a reader's words (the setting that placed it in brackets)."""
    if exp.placed_by == "dense_first":
        return (f"placed among the first by its closeness to the query (dense rank {exp.dense_rank}; setting "
                "dense_first); its graph score is explained below")
    if exp.placed_by in ("dense_fallback", "dense"):
        return "placed by its closeness to the query alone (no graph walk): the dense score is the explanation"
    if exp.placed_by == "dense_agree":
        return ("placed first: the closest passage to the query, and near the top of the graph's ranking "
                "(setting dense_agree); its graph score below")
    if exp.placed_by == "score":
        return "placed by its score (the parts below add up to it)"
    return "placed by the graph walk (PPR)"


def passage_lines(exp, title: str) -> list[str]:
    """The tree of one passage."""
    out = [f"#{exp.rank}  score {exp.ranked_score:.4g}  {title}",
           f"├─ {_placement(exp)}; dense score {exp.dense_score:.3f}, dense rank {exp.dense_rank}"]
    if exp.placed_by in ("dense_fallback", "dense"):
        return out
    total = sum(s.share for s in exp.seeds)
    if getattr(exp, "walk", ""):
        out.append(f"├─ how it is scored: {exp.walk}")
    if getattr(exp, "walk_detail", ""):
        out.append(f"├─ settings: {exp.walk_detail}")
    what = "score" if exp.placed_by == "score" else "PPR score"
    out.append(f"├─ seeds ({len(exp.seeds)}, {_pct(total).strip()} of the {what} {exp.score:.4g})")
    for s in exp.seeds[:SEEDS_SHOWN]:
        out.append(f"│    {_pct(s.share)}  {_clip(s.entity, 40):<40} weight {s.weight:.3g}")
    if len(exp.seeds) > SEEDS_SHOWN:
        rest = sum(s.share for s in exp.seeds[SEEDS_SHOWN:])
        out.append(f"│    {_pct(rest)}  ({len(exp.seeds) - SEEDS_SHOWN} more seeds)")
    prior = exp.dense_prior / exp.score if exp.score > 0 else 0.0
    dense_term = getattr(exp, "dense_term", 0.0)
    share = dense_term / exp.score if exp.score > 0 else 0.0
    if share >= 0.0005:                         # (a vote far below dense retrieval's best is ~0: not shown)
        out.append(f"├─ dense term {_pct(share).strip()} of the score ({dense_term:.4g}: dense retrieval's vote)")
    out.append(f"├─ dense prior {_pct(prior).strip()} of the score; check |terms - score| = {exp.check:.1e}")
    out.append("└─ top paths" if exp.paths else "└─ no walk from a seed reaches this passage")
    for i, p in enumerate(exp.paths):
        last = i == len(exp.paths) - 1
        out.extend(_path_lines(p, "     " if last else "│    ", "└─ " if last else "├─ "))
    return out


def _path_lines(p, indent: str, branch: str) -> list[str]:
    head = " -> ".join(_clip(n, 50) for n in p.nodes)
    out = [f"   {branch}{_pct(p.share).strip()} of the score ({_pct(p.seed_share).strip()} of its seed's): {head}"]
    for e in p.edges:
        out.append(f"   {indent}   {e.kind}: {_clip(e.source, 30)} -> {_clip(e.target, 30)}")
        out.extend(f"   {indent}      \"{_clip(t, TEXT_WIDTH - 20)}\"" for t in e.text)
    return out


def render(explanations: Sequence, titles: Sequence[str]) -> str:
    """The text the command prints for one query's explanations (rank order)."""
    if not explanations:
        return "no passage to explain"
    lines = query_lines(explanations[0])
    for exp, title in zip(explanations, titles, strict=True):
        lines.append("")
        lines.extend(passage_lines(exp, title))
    return "\n".join(lines)


def _item_lines(item, head: str) -> list[str]:
    """One context item: its head (rank, text), then its reason wrapped under it."""
    mark = "" if item.shown else "  [not in the context]"
    out = [f"{head}{_clip(item.text, TEXT_WIDTH - len(head) - len(mark))}{mark}"]
    out.extend(textwrap.wrap(item.reason, TEXT_WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 8))
    return out


def render_provenance(query: str, mode: str, items: Sequence) -> str:
    """The text the command prints for a hi_* mode: the context's items section by section, each
    with why it was chosen (at most ``ITEMS_SHOWN`` per section besides the passages)."""
    if not items:
        return f"query: {query}\nmode: {mode}\nthe context is empty"
    sections: dict[str, list] = {}
    for it in items:
        sections.setdefault(it.section, []).append(it)
    lines = [f"query: {query}", f"mode: {mode} (sections: {', '.join(sections)})"]
    for name, group in sections.items():
        passages = name == "passages"
        count = f"{len(group)} ranked, {sum(1 for i in group if i.shown)} in the context" if passages else \
            f"{len(group)} items"
        lines.extend(["", f"-----{SECTION_TITLES.get(name, name)}----- ({count})"])
        shown = group if passages else group[:ITEMS_SHOWN]
        for it in shown:
            head = f"  #{it.rank:<3}" if passages else f"  {it.rank:>2}. {it.kind.replace('_', ' ')}: "
            lines.extend(_item_lines(it, head))
        if len(group) > len(shown):
            lines.append(f"  ... {len(group) - len(shown)} more (--json)")
    return "\n".join(lines)


def cmd_explain(args) -> int:
    """Explain one query's top passages (``--mode`` a hi_* mode: its context's items)."""
    if args.top is not None:
        if args.top_k is not None:
            print("error: give --top-k or its old name --top, not both", file=sys.stderr)
            return 2
        print("note: --top is deprecated, use --top-k (the old name is accepted for one release)", file=sys.stderr)
    top_k = args.top_k or args.top or 5
    common.existing_index(args)
    rag = common._make_rag(args)
    mode = getattr(args, "mode", None) or "hipporag2"
    sol = rag.retrieve([args.query], top_k, mode=mode, explain=True)[0]
    if mode != "hipporag2":
        if args.json:
            print(json.dumps([i.to_dict() for i in sol.provenance], ensure_ascii=False, indent=1))
        else:
            print(render_provenance(args.query, mode, sol.provenance))
        return common.llm_failures([sol])
    exps = sol.explanations
    if args.json:
        print(json.dumps([e.to_dict() for e in exps], ensure_ascii=False, indent=1))
        return common.llm_failures([sol])
    titles = [d.split("\n", 1)[0] for d in sol.docs[:len(exps)]]
    print(render(exps, titles))
    return common.llm_failures([sol])


def _question(text: str) -> str:
    """argparse type: a question with some text."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"the question ({text!r}) is empty; give the question's text")
    return text


def add_parser(sub) -> None:
    """Register ``explain``."""
    sp: argparse.ArgumentParser = sub.add_parser(
        "explain", help="why a query's top passages ranked: seeds and their shares, paths with their facts")
    sp.add_argument("-q", "--query", required=True, type=_question, help="the question to explain")
    sp.add_argument("--top-k", type=common.positive, default=None,
                    help="passages to explain (default 5), as retrieve's")
    sp.add_argument("--top", type=common.positive, default=None, help="deprecated: the old name of --top-k")
    sp.add_argument("--json", action="store_true", help="print each passage's explanation as JSON (to_dict())")
    sp.add_argument("--mode", choices=explain_modes(), default="hipporag2",
                    help="hipporag2 (default: seeds, shares and paths of the PPR ranking) or a HiRAG mode "
                         "(hi_local, hi_global, hi_bridge, hi: each context item's section and why it was chosen)")
    common.ranking_flags(sp)
    common.shared_flags(sp)
    sp.set_defaults(func=cmd_explain)
