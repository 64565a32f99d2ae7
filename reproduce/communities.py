"""HiRAG communities on the MuSiQue training subset: clustering, report cost, recall per mode,
and the cost of an incremental insert.

    python -m reproduce communities [--data DIR] [--work DIR] [--sample N] [--sample-level L]
                                    [--context-tokens T] [--max-new-tokens M] [--skip-llm]

1. Index the 1,890 passages with the released GPT-3.5 OpenIE file (no LLM call) and the default
   embedder (cached in ``WORK/index``).
2. Cluster the entity graph (hierarchical Leiden) and print the communities per level.
3. Report cost: the default local LLM writes reports for a seeded random sample of ``N``
   communities (``--sample-level`` restricts the sample to one level); time and tokens per
   report, parse failures and fallbacks are measured and extrapolated to all communities.
   These reports are stored; every other community gets the plain member listing (no LLM),
   and the script says how many of each exist.
4. Recall@2/@5/@10 over the 100 questions (``use_filter=False``): ``hipporag2`` without and with
   community nodes (default weights and a few variants), and each mode that returns passages.
5. Incremental: a copy of the index with a seeded random 10% of the documents deleted gets its
   communities, then those documents are inserted again; the number of communities whose member
   set changed is the number of report LLM calls the insert costs (retries aside).

Results go to ``WORK/results.json``.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from hippo_engine import HippoRAG
from hippo_engine.hirag.communities import (
    CommunityDB,
    ReportInputs,
    cluster_entities,
    communities_by_level,
    write_reports,
)
from hippo_engine.hirag.context import token_counter
from hippo_engine.progress import SHOWN

from .common import MUSIQUE_TRAIN_OPENIE, setup_logging, write_result
from .harness import option

logger = logging.getLogger("reproduce.communities")

KS = (2, 5, 10)


def load_data(data: Path) -> tuple[list[str], list[str], list[list[str]]]:
    """(docs, questions, gold docs per question) in the ``"title\\ntext"`` form."""
    corpus = json.loads((data / "musique_train_corpus.json").read_text())
    docs = [f"{d['title']}\n{d['text']}" for d in corpus]
    qs = json.loads((data / "musique_train.json").read_text())
    questions = [q["question"] for q in qs]
    gold = [[f"{p['title']}\n{p['paragraph_text']}" for p in q["paragraphs"] if p.get("is_supporting")] for q in qs]
    return docs, questions, gold


def open_rag(path: Path, **overrides) -> HippoRAG:
    """The index at ``path`` with the default local LLM (used only for reports)."""
    return HippoRAG(path, extractor="openie", show_progress=True, use_filter=False, llm_timeout=900.0, **overrides)


def recall(rag: HippoRAG, questions, gold, mode: str = "hipporag2") -> dict:
    """Recall@k of one retrieval mode. The only facade retrieval call of this module (the one
    place to adapt if ``HippoRAG.retrieve``'s ``mode=`` argument changes)."""
    _, m = rag.retrieve(questions, gold_docs=gold, mode=mode)
    return {f"R@{k}": round(100 * m[f"Recall@{k}"], 1) for k in KS}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``communities`` command's options."""
    option(ap, "--data")
    ap.add_argument("--work", type=Path, default=Path("outputs/communities"),
                    help="index and results folder (default %(default)s)")
    ap.add_argument("--sample", type=int, default=10, help="communities whose report the LLM writes")
    ap.add_argument("--sample-level", type=int, default=None)
    ap.add_argument("--sample-seed", type=int, default=0)
    ap.add_argument("--context-tokens", type=int, default=None, help="report context budget (config default)")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="report reply budget (config default)")
    ap.add_argument("--skip-llm", action="store_true", help="no LLM reports at all (listings only)")


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Index, cluster, sample reports, measure recall per mode and the cost of an insert."""
    setup_logging()
    for noisy in ("httpx", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    docs, questions, gold = load_data(args.data)
    out: dict = {"args": {k: str(v) for k, v in vars(args).items() if k != "command"}}
    idx_dir = args.work / "index"
    overrides = {}
    if args.context_tokens:
        overrides["community_report_context_tokens"] = args.context_tokens
    if args.max_new_tokens:
        overrides["community_report_max_new_tokens"] = args.max_new_tokens

    # 1. index -------------------------------------------------------------------------------
    rag = open_rag(idx_dir, **overrides)
    if len(rag.index_state) < len(set(docs)):
        rag.import_openie(args.data / MUSIQUE_TRAIN_OPENIE)   # every passage covered: no OpenIE LLM call
        t = time.perf_counter()
        rag.index(docs)
        out["index_seconds"] = round(time.perf_counter() - t, 1)
    out["graph"] = rag.graph_stats()
    print("graph:", json.dumps(out["graph"]))

    # 2. clustering --------------------------------------------------------------------------
    cfg = rag.config
    t = time.perf_counter()
    comms = cluster_entities(rag.graph, cfg.max_cluster_size, cfg.community_seed, cfg.community_min_size,
                             cfg.community_max_levels)
    out["cluster_seconds"] = round(time.perf_counter() - t, 2)
    sizes = [c.size for c in comms]
    out["communities"] = {"total": len(comms), "per_level": communities_by_level(comms),
                          "size_mean": round(sum(sizes) / len(sizes), 2), "size_max": max(sizes),
                          "leaves_over_max": sum(1 for c in comms if not c.children and c.size > cfg.max_cluster_size),
                          "entities_in_level0": sum(c.size for c in comms if c.level == 0),
                          "entities": int(rag.graph.num_entities)}
    print("communities:", json.dumps(out["communities"]), f"({out['cluster_seconds']}s)")

    # 3. report cost on a sample ---------------------------------------------------------------
    cdb = CommunityDB(rag.index_state.db)
    existing = cdb.load_reports()
    pool = [c for c in comms if args.sample_level is None or c.level == args.sample_level]
    sample = sorted(random.Random(args.sample_seed).sample(pool, min(args.sample, len(pool))),
                    key=lambda c: (-c.level, c.id))
    if sample and not args.skip_llm:
        st = rag.index_state.stores
        inputs = ReportInputs(rag.graph, st["entity"].text, st["passage"].text, rag.index_state.passage_triples)
        have = {c.key: existing[c.key] for c in sample if c.key in existing and existing[c.key].source == "llm"}
        todo = [c for c in sample if c.key not in have]
        t = time.perf_counter()
        reports, stats = write_reports(todo, inputs, lambda: rag.llm, {}, budget=cfg.community_report_context_tokens,
                                       count=token_counter(rag.encoder),
                                       max_new_tokens=cfg.community_report_max_new_tokens,
                                       temperature=cfg.temperature, progress=SHOWN) if todo else ({}, None)
        wall = time.perf_counter() - t
        with rag.index_state.db.transaction():   # store the sample's reports (reused by the full build)
            c = rag.index_state.db.conn
            c.executemany("INSERT OR REPLACE INTO community_reports VALUES (?, ?, ?)",
                          [(x.key, json.dumps(reports[x.id].to_json()), reports[x.id].source) for x in todo])
        all_reports = list(have.values()) + [reports[x.id] for x in todo]
        llm_reports = [r for r in all_reports if r.source == "llm"]
        per = {"seconds": sum(r.seconds for r in llm_reports) / max(len(llm_reports), 1),
               "prompt_tokens": sum(r.prompt_tokens for r in llm_reports) / max(len(llm_reports), 1),
               "completion_tokens": sum(r.completion_tokens for r in llm_reports) / max(len(llm_reports), 1)}
        out["report_sample"] = {
            "n": len(sample), "levels": communities_by_level(sample), "written_now": len(todo),
            "wall_seconds_now": round(wall, 1), "llm_ok": len(llm_reports),
            "fallback": sum(1 for r in all_reports if r.source == "fallback"),
            "retried": sum(1 for r in all_reports if r.attempts > 1),
            "stats_now": stats.to_dict() if stats else None,
            "per_report": {k: round(v, 1) for k, v in per.items()},
            "extrapolated_all": {"hours": round(per["seconds"] * len(comms) / 3600, 1),
                                 "prompt_tokens": int(per["prompt_tokens"] * len(comms)),
                                 "completion_tokens": int(per["completion_tokens"] * len(comms))},
            "examples": [{"level": x.level, "size": x.size, "source": r.source, "title": r.title,
                          "summary": r.summary[:300], "rating": r.rating}
                         for x, r in zip(sample, [have.get(x.key) or reports[x.id] for x in sample], strict=False)][:5],
        }
        print("report sample:", json.dumps({k: v for k, v in out["report_sample"].items() if k != "examples"}))

    # the full build: stored LLM reports reused, listings elsewhere (no more LLM calls)
    summary = rag.build_communities(max_llm_reports=0)
    cset = rag.communities
    src = {}
    for r in cset.reports.values():
        src[r.source] = src.get(r.source, 0) + 1
    out["build"] = {"summary": summary, "report_sources": src}
    print("build:", json.dumps({"levels": summary["levels"], "report_sources": src,
                                "timings": {k: round(v, 1) for k, v in summary["timings"].items()}}))

    # 4. recall ------------------------------------------------------------------------------
    res: dict = {}
    t = time.perf_counter()
    res["hipporag2"] = recall(rag, questions, gold)
    for name, kw in {"hipporag2+communities (default: seed 0.05, edges 1.0)": {},
                     "hipporag2+communities (edges only, seed 0)": {"community_seed_weight": 0.0},
                     "hipporag2+communities (seed 0.2, edges 0.2)": {"community_seed_weight": 0.2,
                                                                     "community_entity_weight": 0.2,
                                                                     "community_parent_weight": 0.2}}.items():
        on = open_rag(idx_dir, use_community_nodes=True, **overrides, **kw)
        on._encoder = rag.encoder
        res[name] = recall(on, questions, gold)
        on.close()
    for mode in ("naive", "hi_local", "hi_global", "hi_bridge", "hi"):
        t1 = time.perf_counter()
        res[mode] = recall(rag, questions, gold, mode=mode)
        res[mode]["seconds"] = round(time.perf_counter() - t1, 1)
    out["recall"] = res
    out["recall_seconds"] = round(time.perf_counter() - t, 1)
    for k, v in res.items():
        print(f"  {k:55s} {v}")

    # 5. incremental insert of 10% -------------------------------------------------------------
    inc_dir = args.work / "incremental"
    shutil.rmtree(inc_dir, ignore_errors=True)
    rag.close()
    shutil.copytree(idx_dir, inc_dir)
    inc = open_rag(inc_dir, **overrides)
    inc._encoder = rag.encoder
    inc.import_openie(args.data / MUSIQUE_TRAIN_OPENIE)       # the re-inserted passages need no OpenIE call
    extra = random.Random(1).sample(sorted(set(docs)), len(set(docs)) // 10)
    inc.delete(extra)
    base = inc.build_communities(max_llm_reports=0)
    t = time.perf_counter()
    rep = inc.index(extra)
    t_index = time.perf_counter() - t
    if rep.get("openie_llm_passages"):
        raise RuntimeError("the insert ran OpenIE with the LLM; the OpenIE file should cover every passage")
    after = inc.build_communities(max_llm_reports=0)
    changed = after["reports"]["listings"]
    out["incremental"] = {"base_docs": len(set(docs)) - len(extra), "inserted_docs": len(extra),
                          "delete_10pct_new_reports": base["reports"]["listings"],
                          "communities_before": base["communities"], "communities_after": after["communities"],
                          "reused": after["reports"]["reused"], "new_reports_needed": changed,
                          "share_rewritten": round(changed / max(after["communities"], 1), 3),
                          "index_seconds": round(t_index, 1),
                          "cluster_seconds": round(after["timings"]["cluster"], 1)}
    if "report_sample" in out:
        pr = out["report_sample"]["per_report"]
        out["incremental"]["estimated_llm_hours"] = round(changed * pr["seconds"] / 3600, 2)
    print("incremental:", json.dumps(out["incremental"]))
    inc.close()
    write_result(args.work / "results.json", json.dumps(out, indent=2, default=str))
    print(f"wrote {args.work / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit("run: python -m reproduce communities")
