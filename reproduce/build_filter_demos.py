"""Build the recognition filter's demonstrations from training data and save the DSPy program.

Demonstrations come from data, never by hand and never from hippo_engine.evaluation questions:

* Questions: the 100 MuSiQue **train** questions of HippoRAG v1's tuning set
  (``musique/hipporag_v1_train/musique_train.json``). The split is fixed by position:
  the first ``MUSIQUE_TRAIN_EVAL_COUNT`` (80) questions are the evaluation part and are never
  used here; the last 20 are the demo pool. The ids of both parts are written into the program
  JSON (``metadata.hippo_engine.split``); :func:`hippo_engine.retrieve.facts.recognition.filter_demo_question_ids`
  reads them back so evaluation code can exclude the demo questions.
* Facts: the released OpenIE output of that corpus (gpt-3.5-turbo-1106, HippoRAG v1 format),
  normalised as the engine does (lowercase, letters/digits of any script kept, other characters
  to spaces, spaces collapsed; triples with an empty subject or object dropped) and rendered as
  the engine renders facts for embedding (the reference's tuple repr).
* For each pool question: candidates = the embedder's top ``LINKING_TOP_K`` (5) facts over the
  whole corpus; target = the candidates extracted from one of the question's supporting
  passages (at most 4, candidate order).
* Selection: in pool order, the first ``N_WITH_FACTS`` questions whose target is non-empty and
  the first ``N_WITHOUT_FACTS`` whose target is empty, so the program sees both outcomes.

Run from the repository root::

    python -m reproduce build-filter-demos            # writes prompts/filter_program.json
    python -m reproduce build-filter-demos --out /tmp/p.json --dry-run
"""
from __future__ import annotations

import argparse
import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hippo_engine.datatypes import Triple
from hippo_engine.ids import fact_text
from hippo_engine.index.openie import load_openie_file
from hippo_engine.normalize import normalize_phrase
from hippo_engine.retrieve.facts.recognition import (
    FactFilterProgram,
    default_filter_program_path,
    format_facts,
    save_filter_program,
)

from .common import MUSIQUE_TRAIN_DIR, MUSIQUE_TRAIN_OPENIE, REPO_ROOT, file_sha256, setup_logging

logger = logging.getLogger(__name__)

QUESTIONS_FILE = "musique_train.json"

MUSIQUE_TRAIN_EVAL_COUNT = 80  # first 80 questions: evaluation part; last 20: demo pool
LINKING_TOP_K = 5
MAX_KEPT = 4
N_WITH_FACTS = 7
N_WITHOUT_FACTS = 3



def split_musique_train(questions: Sequence[dict]) -> tuple[list[dict], list[dict]]:
    """``(evaluation_part, demo_pool)``: the first ``MUSIQUE_TRAIN_EVAL_COUNT`` questions and the rest."""
    return list(questions[:MUSIQUE_TRAIN_EVAL_COUNT]), list(questions[MUSIQUE_TRAIN_EVAL_COUNT:])


def supporting_passages(question: dict) -> set[str]:
    """The question's supporting passages as ``"title\\ntext"`` strings."""
    return {f"{p['title']}\n{p['paragraph_text']}" for p in question["paragraphs"] if p.get("is_supporting")}


def fact_pool(openie_path: Path, normalization: str = "unicode") -> tuple[list[Triple], list[set[str]]]:
    """All distinct normalised facts of the OpenIE file and, per fact, the passages it came from."""
    sources: dict[Triple, set[str]] = defaultdict(set)
    for res in load_openie_file(openie_path).values():
        for s, p, o in res.triples:
            t = (normalize_phrase(s, normalization), normalize_phrase(p, normalization),
                 normalize_phrase(o, normalization))
            if t[0] and t[2]:
                sources[t].add(res.passage)
    facts = sorted(sources)
    return facts, [sources[f] for f in facts]


def top_k_candidates(fact_vecs: np.ndarray, query_vec: np.ndarray, k: int) -> list[int]:
    """Indices of the ``k`` highest-scoring facts (ties broken by index), best first."""
    scores = fact_vecs @ query_vec
    order = np.lexsort((np.arange(len(scores)), -scores))
    return [int(i) for i in order[:k]]


def build_records(pool: Sequence[dict], facts: Sequence[Triple], sources: Sequence[set[str]],
                  fact_vecs: np.ndarray, query_vecs: np.ndarray) -> list[dict[str, Any]]:
    """One record per pool question: candidates (top-k facts) and target (those from gold passages)."""
    records = []
    for q, qv in zip(pool, query_vecs, strict=False):
        gold = supporting_passages(q)
        idx = top_k_candidates(fact_vecs, qv, LINKING_TOP_K)
        candidates = [facts[i] for i in idx]
        target = [facts[i] for i in idx if sources[i] & gold][:MAX_KEPT]
        records.append({"id": q["id"], "question": q["question"], "candidates": candidates, "target": target})
    return records


def select_demos(records: Sequence[dict], n_with: int = N_WITH_FACTS, n_without: int = N_WITHOUT_FACTS) -> list[dict]:
    """The first ``n_with`` records with a non-empty target and the first ``n_without`` with an
    empty one, kept in pool order."""
    with_facts = [r["id"] for r in records if r["target"]][:n_with]
    without = [r["id"] for r in records if not r["target"]][:n_without]
    chosen = set(with_facts) | set(without)
    return [r for r in records if r["id"] in chosen]


def _rel(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPO_ROOT.parent).as_posix()
    except ValueError:
        return str(path)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``build-filter-demos`` command's options."""
    ap.add_argument("--data-dir", type=Path, default=MUSIQUE_TRAIN_DIR,
                    help="folder with musique_train.json and the released OpenIE file")
    ap.add_argument("--out", type=Path, default=default_filter_program_path(), help="program JSON to write")
    ap.add_argument("--embedder", default=None, help="embedding model (default: the engine's default)")
    ap.add_argument("--n-with-facts", type=int, default=N_WITH_FACTS)
    ap.add_argument("--n-without-facts", type=int, default=N_WITHOUT_FACTS)
    ap.add_argument("--dry-run", action="store_true", help="print the demos, write nothing")


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Build the demonstrations and save the program (or only print them with ``--dry-run``)."""
    setup_logging()

    from hippo_engine.config import HippoConfig
    from hippo_engine.models.encoder import TransformersEncoder

    q_path, o_path = args.data_dir / QUESTIONS_FILE, args.data_dir / MUSIQUE_TRAIN_OPENIE
    questions = json.loads(q_path.read_text(encoding="utf-8"))
    evaluation, pool = split_musique_train(questions)
    facts, sources = fact_pool(o_path)
    logger.info("%d questions (%d evaluation, %d demo pool), %d distinct facts",
                len(questions), len(evaluation), len(pool), len(facts))

    cfg = HippoConfig()
    encoder = TransformersEncoder(args.embedder)
    fact_vecs = encoder.encode([fact_text(f) for f in facts], show_progress=True, desc="Embedding facts")
    query_vecs = encoder.encode([q["question"] for q in pool], instruction=cfg.query_instruction_fact)
    records = build_records(pool, facts, sources, fact_vecs, query_vecs)
    demos = select_demos(records, args.n_with_facts, args.n_without_facts)

    n_target = [len(r["target"]) for r in records]
    summary = {
        "pool_size": len(records),
        "pool_target_sizes": {str(k): n_target.count(k) for k in sorted(set(n_target))},
        "demos": len(demos),
        "demo_target_sizes": [len(r["target"]) for r in demos],
    }
    for r in demos:
        print(json.dumps({"id": r["id"], "question": r["question"], "candidates": r["candidates"],
                          "target": r["target"]}, ensure_ascii=False))
    print(json.dumps(summary))
    if args.dry_run:
        return 0

    import dspy

    program = FactFilterProgram()
    program.predict.demos = [
        dspy.Example(question=r["question"], candidate_facts=format_facts(r["candidates"]),
                     relevant_facts=format_facts(r["target"]))
        for r in demos
    ]
    metadata = {
        "description": "Recognition-memory fact filter of hippo-engine; demonstrations built by "
                       "reproduce/build_filter_demos.py from MuSiQue train data (not from hippo_engine.evaluation "
                       "questions).",
        "builder": "reproduce/build_filter_demos.py",
        "sources": {
            "questions": {"path": _rel(q_path), "sha256": file_sha256(q_path)},
            "openie": {"path": _rel(o_path), "sha256": file_sha256(o_path),
                       "model": "gpt-3.5-turbo-1106 (HippoRAG v1 release)"},
        },
        "split": {
            "rule": f"musique_train.json by position: first {MUSIQUE_TRAIN_EVAL_COUNT} = evaluation part, "
                    f"last {len(pool)} = demo pool",
            "musique_train_evaluation_ids": [q["id"] for q in evaluation],
            "musique_train_demo_pool_ids": [q["id"] for q in pool],
        },
        "demo_question_ids": [r["id"] for r in demos],
        "candidates": f"top {LINKING_TOP_K} facts by embedding similarity to the question over all "
                      f"{len(facts)} distinct normalised facts of the corpus",
        "target": "candidates extracted from a supporting passage of the question (at most 4, candidate order)",
        "selection": f"pool order: the first {args.n_with_facts} questions with a non-empty target and "
                     f"up to {args.n_without_facts} with an empty one (the pool has "
                     f"{sum(1 for r in records if not r['target'])} with an empty target)",
        "embedder": getattr(encoder, "name", args.embedder),
        "normalization": "unicode",
        "summary": summary,
    }
    path = save_filter_program(program, args.out, metadata)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit("run: python -m reproduce build-filter-demos")
