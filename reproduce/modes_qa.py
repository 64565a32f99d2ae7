"""QA of ``python -m reproduce table-modes --qa N``: every mode answers the first N MuSiQue questions with
the packaged reader prompt and the reader LLM (default: the engine's default local LLM, response cache
off so every call is made and counted). The part (``qa-musique-<variant>.json``) is saved after each
question: a mode's finished row when its last question is answered, and until then the questions it has
answered (``partial``), which a later run continues from (each question is answered alone: the engine ranks
a query alike alone or batched, and the reader makes one call per question either way).
A later run with the same questions, index and LLM keeps the modes already answered: ``--qa-redo``
answers the listed modes again, and a mode answered on a sample (``--qa-sample``) is answered again when
more questions are asked. So a long run on a slow machine can be resumed and done in pieces; each piece
is recorded (command, commit, LLM threads, wall time, load) in the part's ``sessions``.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence

from .common import engine_commit, machine, uptime
from .modes_report import part_name, save_part, shown_command
from .rankings import PAPER_WALK

#: what a mode's ``partial`` state keeps per answered question
PER_QUESTION = ("answers", "em", "f1", "calls", "prompt_tokens", "completion_tokens", "errors", "context_cut")


def qa_rows(rag, dataset, n: int, modes: Sequence[str], on_row: Callable[[str, dict], None] | None = None,
            sample: int | None = None, sampled: Sequence[str] = (), partial: dict | None = None,
            on_question: Callable[[str, dict], None] | None = None) -> dict[str, dict]:
    """Per mode: EM/F1 (%) on the first ``n`` questions (the first ``sample`` for the modes in ``sampled``),
    LLM calls and tokens per query, seconds, errors, each question's predicted answer and LLM calls, and
    the load when the mode finished; ``on_row(mode, row)`` after each mode. ``partial``: per mode, the
    questions answered so far (continued here, updated in place; a finished mode's entry is removed);
    ``on_question(mode, state)`` after each question."""
    partial = {} if partial is None else partial
    out = {}
    for mode in modes:
        k = min(n, sample) if sample is not None and mode in sampled else n
        st = partial.setdefault(mode, {**{f: [] for f in PER_QUESTION}, "seconds": 0.0})
        for f in PER_QUESTION:              # (a smaller sample than before: its first questions)
            st.setdefault(f, [None] * len(st["answers"]))      # saved before the field existed: unknown
            del st[f][k:]
        for i in range(len(st["answers"]), k):
            _answer_one(rag, dataset, i, mode, st)
            if on_question is not None:
                on_question(mode, st)
        row = _row(st, k)
        del partial[mode]
        out[mode] = row
        print(f"  {mode:16s} EM {row['em']:5.1f} F1 {row['f1']:5.1f}  calls/q {row['calls']:.2f}"
              f"  tokens/q {row['tokens']:.0f}  {row['seconds']:.0f} s  errors {row['errors']}", flush=True)
        if on_row is not None:
            on_row(mode, row)
    return out


def _answer_one(rag, dataset, i: int, mode: str, st: dict) -> None:
    """Answer question ``i`` alone in ``mode`` and add what it cost to ``st``."""
    from hippo_engine.config import QueryParam

    t = time.perf_counter()
    sols, _, meta, _, qa = rag.rag_qa([dataset.questions[i]], gold_docs=[dataset.gold_docs[i]],
                                      gold_answers=[dataset.gold_answers[i]], param=QueryParam(mode=mode))
    m = meta[0]
    for f, v in (("answers", sols[0].answer), ("em", qa["ExactMatch"]), ("f1", qa["F1"]),
                 ("calls", m.get("llm_calls", 1)), ("prompt_tokens", int(m.get("prompt_tokens") or 0)),
                 ("completion_tokens", int(m.get("completion_tokens") or 0)),
                 ("errors", str(m["error"])[:200] if m.get("error") else None),
                 ("context_cut", int(m.get("context_cut") or 0))):
        st[f].append(v)
    st["seconds"] += time.perf_counter() - t


def _row(st: dict, k: int) -> dict:
    """A mode's row from the states of its ``k`` answered questions (means over the questions)."""
    tok = {f: sum(st[f]) / k for f in ("prompt_tokens", "completion_tokens")}
    errors = [e for e in st["errors"] if e]
    return {"f1": 100 * (sum(st["f1"]) / k), "em": 100 * (sum(st["em"]) / k), "questions": k,
            "calls": sum(st["calls"]) / k, **tok, "tokens": tok["prompt_tokens"] + tok["completion_tokens"],
            "seconds": st["seconds"], "errors": len(errors), "error_messages": sorted(set(errors)),
            "contexts_cut": sum(1 for c in st["context_cut"] if c),   # questions whose context was cut to the window
            "answers": list(st["answers"]), "calls_each": list(st["calls"]), "uptime": uptime()}


def context_rows(rag, dataset, n: int, modes: Sequence[str]) -> dict[str, dict]:
    """Per mode, what the reader would read for the first ``n`` questions, without an LLM call: the context
    tokens per query (mean, max; the engine's token counter, prompt template not counted) of the mode's
    context (its top ``qa_top_k`` passages for the modes that answer from passages) and, for
    ``graphrag_global``, its map batches per query (one map call each)."""
    from hippo_engine.graphrag.global_context import batches

    qs, out = list(dataset.questions[:n]), {}
    for mode in modes:
        if rag.searches.search(mode).spec.reads_context:
            ctxs = rag.retrieve_context(qs, mode=mode)
        else:   # the reader's passages: the mode's ranking, wrapped as rag_qa reads it
            ctxs = rag.retrieve_context(rag.retrieve(qs, mode=mode), mode=mode)
        toks = [sum(c.tokens.values()) for c in ctxs]
        out[mode] = {"mean": sum(toks) / len(toks), "max": max(toks), "sections": _section_means(ctxs)}
        if mode == "graphrag_global":
            nb = [len(batches(c)) for c in ctxs]
            out[mode]["batches_mean"], out[mode]["batches_max"] = sum(nb) / len(nb), max(nb)
    return out


def _section_means(ctxs) -> dict[str, float]:
    keys = sorted({k for c in ctxs for k in c.tokens})
    return {k: sum(c.tokens.get(k, 0) for c in ctxs) / len(ctxs) for k in keys}


def _previous(args, entry: dict) -> dict:
    """The saved QA part this run continues (same questions, index and LLM), else {}."""
    path = args.parts / part_name(entry)
    if not path.exists():
        return {}
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"table-modes: cannot read the QA part {path}: {exc}") from exc
    old["llm_client"] = str(old.get("llm_client", "")).split(" (")[0]   # parts of b72f1fe named the threads too
    same = all(old.get(k) == entry[k] for k in ("questions", "variant", "llm", "llm_client", "qa_top_k"))
    return old if same else {}


def run_qa(args, argv: Sequence[str], runner, dataset, llm=None) -> dict:
    """Answer the first ``args.qa`` questions in each of ``args.qa_modes`` over ``runner``'s index; the
    QA part saved after each mode (modes already in a matching saved part are kept, not run again)."""
    from hippo_engine import HippoRAG

    from .table_modes import MODES, _communities
    from .tables.methods import hippo_method

    t0, load = time.perf_counter(), uptime()
    kw = {} if args.llm_base_url is None else {"llm_base_url": args.llm_base_url}
    rag = HippoRAG(runner.save_dir, llm_model_name=args.llm, llm=llm, encoder=runner.encoder,
                   **{**runner._overrides, **hippo_method(False, **PAPER_WALK).config, **kw, "show_progress": False,
                      "llm_cache": False, "llm_timeout": args.llm_timeout})
    try:
        entry = {"kind": "qa", "dataset": "MuSiQue", "variant": args.qa_variant, "questions": args.qa,
                 "llm": rag.llm_model_name, "llm_client": _client(rag), "qa_top_k": rag.config.qa_top_k,
                 "comm": _communities(rag), "gold_answers": [list(a) for a in dataset.gold_answers[:args.qa]],
                 "questions_text": list(dataset.questions[:args.qa])}
        old = _previous(args, entry)
        rows = {m: r for m, r in old.get("rows", {}).items()}
        sampled = [m for m in args.qa_sample_modes.split(",") if m] if args.qa_sample is not None else []
        todo = _todo(args, rows, sampled)
        session = {"command": shown_command(argv), "commit": engine_commit(), "load_before": load, "modes": todo,
                   "done": [], "machine": machine()}
        # the file's machine is the first session's; a session on another machine says its own
        entry.update(rows=rows, sessions=[*old.get("sessions", []), session], machine=old.get("machine", machine()))
        if sampled:
            entry["sample_reason"] = args.qa_sample_reason
        elif "sample_reason" in old:
            entry["sample_reason"] = old["sample_reason"]

        partial = entry["partial"] = kept_partial(old.get("partial", {}), rows, todo)

        def question(mode: str, state: dict) -> None:
            save_part(args.parts, entry)

        def save(mode: str, row: dict) -> None:
            rows[mode] = row
            session["done"].append(mode)     # the threads a local model chose when it loaded
            session.update(wall_s=time.perf_counter() - t0, load_after=uptime(),
                           llm_threads=getattr(getattr(rag.llm, "inner", rag.llm), "num_threads", None))
            save_part(args.parts, entry)

        entry["contexts"] = context_rows(rag, dataset, args.qa, list(MODES))
        save_part(args.parts, entry)
        if old:
            print(f"QA: continuing {args.parts / part_name(entry)}; kept {', '.join(rows) or 'none'}", flush=True)
        for m, state in partial.items():
            print(f"QA: continuing {m} from question {len(state['answers']) + 1}", flush=True)
        qa_rows(rag, dataset, args.qa, todo, save, args.qa_sample, sampled, partial, question)
        save_part(args.parts, entry)
    finally:
        rag.close()
    return entry


def kept_partial(partial: dict, rows: dict, todo: Sequence[str]) -> dict:
    """The answered questions of a saved part to continue from: every mode's but a finished row's (a
    mode to answer again, e.g. with a row over a smaller sample than asked now, continues from its own
    answered questions instead of starting over)."""
    return {m: st for m, st in partial.items() if m not in rows or m in todo}


def _todo(args, rows: dict, sampled: Sequence[str]) -> list[str]:
    """The modes of ``args.qa_modes`` to answer: those without a row, with a row over fewer questions
    than asked now (a sample being completed), or all of them with ``--qa-redo``."""
    def target(mode: str) -> int:
        return min(args.qa, args.qa_sample) if mode in sampled else args.qa

    wanted = [m for m in args.qa_modes.split(",") if m]
    return [m for m in wanted if args.qa_redo or m not in rows or rows[m].get("questions", args.qa) < target(m)]


def _client(rag) -> str:
    """The reader client's class (its backend), without loading the model."""
    return type(getattr(rag.llm, "inner", rag.llm)).__name__
