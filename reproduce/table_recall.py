"""LLM-free recall (issue 24): dense retrieval, the ``extractor="ner"`` memory and its variants on MuSiQue,
2Wiki and 2Wiki single-relation questions (issue 38), with and without passage titles, corpus order shuffled.

    python -m reproduce table-recall-llm-free [--datasets musique,2wiki,2wiki_single] [--titles both|titled|untitled]
        [--limit N] [--work DIR] [--out FILE]

Per dataset variant (``reproduce/recall_data.py``): the ``ner`` index is built once under ``--work`` (default
``outputs/reproduce/recall-llm-free``) through a caching encoder and reused; every question is encoded
once; the rows (:func:`rows`) are rankings over that index (``reproduce/recall_bench.py``): dense retrieval,
the one-walk ``ner`` path (the default before issue 24), the title substitute, each second-hop strategy
(``hippo_engine/retrieve/second/second_hop.py``), the top-rank rules, and the new default (the engine's ``"auto"``
settings on a ``ner`` index, checked equal to ``HippoRAG.retrieve`` on the first 20 questions). No LLM is
called (the index and the queries use an LLM that fails on any call). (``python -m reproduce table-recall`` is
the paper's Table 3 / 9; issue 24's table is this command.)

Printed and written (``--out``, default ``reproduce/results/recall/table.md``; a JSON of every figure beside
it): Recall@1/2/5/10/20 per row, the share of second-hop gold passages (a gold passage that shares no
entity with the question's spaCy entities, decided on the titled index) in the top 5 / 20, retrieval
milliseconds per question over the batch (dense scores, linking, walks; encoding excluded), the index
builds (wall time, texts encoded and taken from the cache) and the load (``uptime``). On the single-relation
sets (``2wiki_single`` and its halves ``2wiki_single_first`` / ``_second``, :mod:`reproduce.recall_data`) also
Recall@k of each gold kind: the subject's page (each question's first gold passage) and the answer entity's page.
"""
from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hippo_engine.retrieve.second.second_hop import WideHop

from .common import RESULTS_DIR, setup_logging, write_result
from .harness import RECALL_WORK, option
from .peer_linearrag import Options as PeerOptions
from .peer_linearrag import row_maker as linearrag_row
from .peer_linearrag import usable
from .recall_bench import KS, TOP, Bench, agree_first

OUT = RESULTS_DIR / "recall" / "table.md"


@dataclass(frozen=True)
class Row:
    """A row: its key, its label and how its ranking is made from a :class:`Bench` (rankings and the
    retrieval seconds behind them, encoding excluded)."""

    key: str
    label: str
    make: Callable[[Bench], tuple[list[np.ndarray], float]]


def _dense(b: Bench):
    return b.dense_ranking(), b.dense_s


def engine(**config):
    """A row maker: the engine's own search (``Retriever.search`` of a retriever built with these
    retrieval options over the index, queries already encoded), ranking every question."""
    def make(b: Bench):
        from hippo_engine.retrieve.retriever import Retriever

        r = Retriever.from_index(b.rag.config.replace(**config), b.rag.index_state)
        results, tim = r.search(list(b.ds.questions), b.q_fact, b.q_pass, TOP, None, b.ner_vectors)
        return [res.order for res in results], tim["total"]
    return make


def _old_default(b: Bench):
    """The default before issue 38 (rules, not a score): the second walk ``wide`` with the first walk's two best
    passages put in front (``second_hop.keep_head``), then dense retrieval's best passage moved first where the
    graph had it among its two best (``dense_agree=2``). Rebuilt from the bench's walks (the second walk solved
    afresh, the engine's updated one within its push tolerance), for the side-by-side rows."""
    t = time.perf_counter()
    w = b.refine(b.walk(1), WideHop(sentences=2, keep_head=2))
    dense = b.dense_ranking()
    ranking = [agree_first(order, dense[j], 2) for j, order in enumerate(b.ranking(w))]
    return ranking, time.perf_counter() - t + b.dense_s


def _topic(b: Bench):
    """Not an engine option (it did not win): the bench's walk with the topic entity of each linked
    sentence's passage added to its links."""
    w = b.walk(1, topic=True)
    return b.ranking(w), w.seconds + b.dense_s


#: the measured best LLM-free configuration, now what ``"auto"`` resolves to on a ``ner`` index
#: (``hippo_engine.auto.NER_RETRIEVAL``; see reproduce/results/recall/README.md)
RECOMMENDED: dict = {"second_hop": "wide", "second_hop_head": 2, "dense_agree": 0, "dense_weight": 1.5}
#: one walk, no top-rank rule: the engine's default before issue 24 (and the paper's path on any index)
ONE_WALK: dict = {"second_hop": "none", "dense_agree": 0, "dense_weight": 0.0}


def rows(peer: PeerOptions | None = None) -> list[Row]:
    """Every row of the table, in order. The rows other than ``new`` set the second hop and the top-rank
    rule explicitly; ``new`` is the engine's default (``"auto"`` settings resolved on the ``ner`` index);
    ``linearrag`` is LinearRAG's public code from the checkout ``peer`` names (``reproduce/peer_linearrag.py``),
    the best of its settings at each k."""
    def walk(**config):
        return engine(**{**ONE_WALK, **config})

    return [
        Row("dense", "dense retrieval (all-MiniLM-L6-v2)", _dense),
        Row("ner", "ner, one walk (second_hop='none', dense_agree=0: the default before)", walk()),
        Row("ner+df1", "ner + dense_first=1", walk(dense_first=1)),
        Row("ner+agree2", "ner + dense_agree=2", walk(dense_agree=2)),
        Row("topic", "ner + topic entity of untitled passages (central; not kept)", _topic),
        Row("wide", "ner + second_hop='wide'", walk(second_hop="wide")),
        Row("bridge", "ner + second_hop='bridge'", walk(second_hop="bridge")),
        Row("reseed", "ner + second_hop='reseed'", walk(second_hop="reseed")),
        Row("old", "old default (rules: wide, the first walk's 2 best in front, dense_agree=2)", _old_default),
        Row("new", "**new default** (auto: wide; one score: second walk + 2 x first walk's 2 best + 1.5 x dense vote)",
            engine()),
        Row("linearrag", "LinearRAG (public code, MiniLM, en_core_web_sm; best of 3 settings per k)",
            linearrag_row(peer)),
    ]


#: other names a row answers to in ``--rows`` (``default``: the engine's default, the ``new`` row)
ROW_ALIASES = {"default": "new"}


def best(measure: Callable, ranking):
    """``measure(ranking)`` (a dict, maybe nested, of figures); for a row that gives several named rankings
    (a dict: LinearRAG's settings), the best figure of any of them at each key."""
    if not isinstance(ranking, dict):
        return measure(ranking)
    parts = [measure(r) for r in ranking.values()]

    def top(vals):
        return {k: top([v[k] for v in vals]) for k in vals[0]} if isinstance(vals[0], dict) else max(vals)
    return top(parts)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The command's options."""
    ap.add_argument("--datasets", default="musique,2wiki,2wiki_single",
                    help="comma-separated: musique, 2wiki, 2wiki_single (2Wiki single-relation questions), "
                         "2wiki_single_first, 2wiki_single_second (its halves) (default the first three)")
    ap.add_argument("--titles", choices=("both", "titled", "untitled"), default="both")
    option(ap, "--limit", help="only the first N questions of each dataset")
    ap.add_argument("--rows", default=None,
                    help="comma-separated row keys (default all; 'default' names the engine's default, the 'new' row)")
    option(ap, "--work", default=RECALL_WORK, help="indexes and the encoder cache (default %(default)s)")
    option(ap, "--data-root")
    option(ap, "--out", default=OUT, help="markdown result (default %(default)s)")
    ap.add_argument("--no-check", action="store_true", help="skip the check against HippoRAG.retrieve")
    ap.add_argument("--sentence-vectors", choices=("encode", "pooled"), default="encode",
                    help="the indexes' sentence vectors: encoded alone (default) or pooled from their passages' "
                         "forward passes (issue 43; those indexes go under <work>/pooled, the encoder cache is shared)")
    ap.add_argument("--linearrag-src", default=None,
                    help="a LinearRAG checkout for the linearrag row (default $HIPPO_LINEARRAG_SRC)")
    option(ap, "--verbose")


def _variants(args) -> list[tuple[str, bool]]:
    names = [x.strip() for x in args.datasets.split(",") if x.strip()]
    from .recall_data import DATASETS
    bad = [n for n in names if n not in DATASETS]
    if bad or not names:
        raise SystemExit(f"--datasets takes {', '.join(DATASETS)}; got {args.datasets!r}")
    titles = {"both": (True, False), "titled": (True,), "untitled": (False,)}[args.titles]
    return [(n, t) for n in names for t in titles]


def measure(args, name: str, titles: bool, chosen: Sequence[Row], encoder, masks: dict) -> dict:
    """Every chosen row on one dataset variant: recall, second-hop shares, milliseconds per question."""
    from .recall_data import SINGLE, build_info, load, open_index

    ds = load(name, titles, args.data, args.limit)
    pooled = args.sentence_vectors == "pooled"
    work = args.work / "pooled" if pooled else args.work
    rag = open_index(work, name, titles, ds.docs, encoder, **({"sentence_vectors": "pooled"} if pooled else {}))
    try:
        b = Bench(rag, ds)
        if titles or name not in masks:
            masks[name] = b.second_hop_gold()
        mask = masks[name]
        if [len(m) for m in mask] != [len(g) for g in b.gold]:
            raise RuntimeError(f"{name}: the untitled gold lists differ in length from the titled ones")
        out = {"dataset": name, "titles": titles, "questions": b.nq, "passages": len(ds.docs),
               "second_hop_gold": int(sum(map(sum, mask))), "gold": int(sum(map(len, mask))),
               "build": build_info(work, name, titles), "hop_index_s": b.hop_build_s, "rows": {}}
        for row in chosen:
            ranking, seconds = row.make(b)
            if row.key == "new" and not args.no_check:
                b.check(ranking)           # HippoRAG.retrieve (the engine's defaults) gives the same ranking
            share = best(lambda r: b.recall(r, (5, 20), mask), ranking)
            out["rows"][row.key] = {"label": row.label, "recall": best(b.recall, ranking),
                                    "second_hop": share, "ms_per_question": 1000.0 * seconds / b.nq}
            if name in SINGLE:
                out["rows"][row.key]["kinds"] = best(lambda r: gold_kind_recall(b, r), ranking)
                out["rows"][row.key]["halves"] = best(lambda r: half_recall(b, r), ranking)
            if isinstance(ranking, dict):
                out["rows"][row.key]["settings"] = {n: b.recall(r) for n, r in ranking.items()}
            r = out["rows"][row.key]
            print(f"{name} {'titled' if titles else 'untitled'} {row.key:12s} "
                  + " ".join(f"{r['recall'][k]:5.1f}" for k in KS)
                  + f" | 2nd-hop@5/20 {share[5]:5.1f} {share[20]:5.1f} | {r['ms_per_question']:.1f} ms/q", flush=True)
        return out
    finally:
        rag.close()


def gold_kind_recall(b: Bench, ranking) -> dict[str, dict[int, float]]:
    """Recall@k of the subject's page (the first gold passage) and of the answer entities' pages (the rest)."""
    subject = [[i == 0 for i in range(len(g))] for g in b.gold]
    answer = [[i > 0 for i in range(len(g))] for g in b.gold]
    return {"subject": b.recall(ranking, KS, subject), "answer": b.recall(ranking, KS, answer)}


def half_recall(b: Bench, ranking) -> dict[str, dict[int, float]]:
    """Recall@k on each half of a single-relation set (the half is the start of each question's id)."""
    half = [qid.split(":", 1)[0] for qid in b.ds.question_ids]
    return {h: b.recall(ranking, KS, [[half[j] == h] * len(g) for j, g in enumerate(b.gold)])
            for h in ("first", "second") if h in half}


def _kind_lines(res: dict) -> list[str]:
    """The gold-kind table of a single-relation set (nothing for the others)."""
    rows = [r for r in res["rows"].values() if "kinds" in r]
    if not rows:
        return []
    out = ["Per gold kind (R@k of the subject's page | of the answer entity's page, where the corpus has it):", "",
           "| row | " + " | ".join(f"subject R@{k}" for k in KS) + " | " + " | ".join(f"answer R@{k}" for k in KS)
           + " |", "| --- |" + " --- |" * (2 * len(KS))]
    for r in rows:
        out.append(f"| {r['label']} | " + " | ".join(f"{r['kinds'][kind][k]:.1f}" for kind in ("subject", "answer")
                                                     for k in KS) + " |")
    halves = sorted({h for r in rows for h in r.get("halves", {})})
    if len(halves) > 1:
        out += ["", "Per half (R@k on the first half's questions | on the second's):", "",
                "| row | " + " | ".join(f"{h} R@{k}" for h in halves for k in KS) + " |",
                "| --- |" + " --- |" * (len(halves) * len(KS))]
        out += [f"| {r['label']} | " + " | ".join(f"{r['halves'][h][k]:.1f}" for h in halves for k in KS) + " |"
                for r in rows]
    return out + [""]


def markdown(results: list[dict], argv: Sequence[str], load_before: str, load_after: str, commit: str) -> str:
    """The tables of one run."""
    shown = list(argv[1:] if argv[:1] == ["table-recall-llm-free"] else argv)
    lines = ["# LLM-free recall: dense vs the `ner` memory and its variants (issue 24)", "",
             "```bash", " ".join(["python -m reproduce table-recall-llm-free", *shown]), "```", "",
             f"Engine commit `{commit}`; load (`uptime`) before: `{load_before}`; after: `{load_after}`.", ""]
    for res in results:
        b = res["build"]
        lines += [f"## {res['dataset']}, {'titled' if res['titles'] else 'untitled'} passages "
                  f"({res['questions']} questions, {res['passages']:,} passages, corpus shuffled)", "",
                  f"Second-hop gold passages: {res['second_hop_gold']} of {res['gold']}. Index: "
                  + (f"built in {b.get('wall_s', 0):.0f} s ({b.get('encoded_texts', 0):,} texts encoded, "
                     f"{b.get('cached_texts', 0):,} from the encoder cache)" if b else "built elsewhere")
                  + f"; second-hop index {1000 * res['hop_index_s']:.0f} ms.", "",
                  "| row | " + " | ".join(f"R@{k}" for k in KS) + " | 2nd-hop in top 5 | in top 20 | ms / question |",
                  "| --- | " + " | ".join("---" for _ in KS) + " | --- | --- | --- |"]
        for r in res["rows"].values():
            lines.append(f"| {r['label']} | " + " | ".join(f"{r['recall'][k]:.1f}" for k in KS)
                         + f" | {r['second_hop'][5]:.1f} | {r['second_hop'][20]:.1f} | {r['ms_per_question']:.1f} |")
        lines.append("")
        lines += _kind_lines(res)
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Measure every dataset variant; print and write the tables."""
    from hippo_engine.models.encoder import TransformersEncoder

    from .common import engine_commit, uptime
    from .recall_data import CachingEncoder

    setup_logging(args.verbose)
    if args.limit is not None and args.limit <= 0:
        raise SystemExit("--limit must be positive")
    every = rows(PeerOptions(args.linearrag_src, args.work))
    given = [k.strip() for k in args.rows.split(",")] if args.rows else [r.key for r in every]
    keys = [ROW_ALIASES.get(k, k) for k in given]
    unknown = [k for k in keys if k not in {r.key for r in every}]
    if unknown:
        raise SystemExit(f"--rows: unknown row(s) {', '.join(unknown)}; known: {', '.join(r.key for r in every)}")
    chosen = usable([r for r in every if r.key in keys], args.linearrag_src, bool(args.rows))
    variants = _variants(args)
    if not (args.data / "musique").is_dir():
        print(f"table-recall-llm-free: skipped, no data under {args.data} (see ../shared/data/SOURCES.md)")
        return 0
    encoder = CachingEncoder(TransformersEncoder(), args.work / "vectors.sqlite")
    load_before, t0 = uptime(), time.perf_counter()
    masks: dict = {}
    results = [measure(args, n, t, chosen, encoder, masks) for n, t in variants]
    text = markdown(results, argv, load_before, uptime(), engine_commit())
    path = write_result(args.out, text + f"\nWall time {time.perf_counter() - t0:.0f} s.\n")
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(path)
    return 0
