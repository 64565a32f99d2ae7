"""Two writers, one index: two processes index different halves of the MuSiQue passages into one
``save_dir`` at the same time while a third retrieves throughout.

    python -m reproduce two-writers [--passages 600] [--trials 10] [--batch 50] [--encoder real|fake]

The passages come with their released OpenIE results (no LLM call); each writer imports them and
indexes its half in batches of ``--batch``, so the two interleave under the engine's writer lock.
Per trial the final index is compared with a clean build of all passages made once by this
process: graph statistics, node and edge sets with weights, stores and synonymy
(``diff_snapshots``). The reader process retrieves a MuSiQue question after another from the
moment the writers start; any exception other than "the index is empty" (before the first
commit) is an error. After the writers finish, the reader must see every passage (the index
size, and a retrieval of all passages returns all of them).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

from hippo_engine.index.diagnostics import diff_snapshots, snapshot_index

from ..common import REPO_ROOT
from ..harness import option, report_options
from .reliability import (
    header,
    load_line,
    make_encoder,
    musique_passages,
    musique_questions,
    open_engine,
    stats_diff,
    write_openie_subset,
    write_reports,
)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``two-writers`` command's options."""
    ap.add_argument("--passages", type=int, default=600, help="MuSiQue passages, split in two halves (default 600)")
    ap.add_argument("--trials", type=int, default=10, help="trials (default 10)")
    ap.add_argument("--batch", type=int, default=50, help="passages per index() call of a writer (default 50)")
    option(ap, "--encoder")
    option(ap, "--work", default=Path("outputs/two_writers"))
    report_options(ap, "two_writers", "--role", "--save-dir", "--half", "--result")


# ----------------------------------------------------------------------------- the processes
def _wait_for(path: Path, timeout: float = 900.0) -> None:
    t = time.monotonic()
    while not path.exists():
        if time.monotonic() - t > timeout:
            raise TimeoutError(f"{path} did not appear within {timeout:g} s")
        time.sleep(0.01)


def writer(args: argparse.Namespace) -> int:
    """Import the OpenIE results, wait for the start signal, index one half batch by batch."""
    work = Path(args.work)
    docs = json.loads((work / "docs.json").read_text(encoding="utf-8"))
    half = docs[: len(docs) // 2] if args.half == "a" else docs[len(docs) // 2:]
    rag = open_engine(Path(args.save_dir), make_encoder(args.encoder))
    rag.encoder.encode(["warm-up"])
    Path(args.result + ".ready").write_text("1")
    _wait_for(work / "go")
    rag.import_openie(work / "openie.json")
    spans = []
    for i in range(0, len(half), args.batch):
        t0 = time.time()
        rep = rag.index(half[i:i + args.batch])
        spans.append([t0, time.time(), rep.get("added", 0)])
    Path(args.result).write_text(json.dumps({"spans": spans, "stats": rag.graph_stats()}))
    return 0


def reader(args: argparse.Namespace) -> int:
    """Retrieve a question after another until told to stop, then once more over every passage."""
    work = Path(args.work)
    questions = musique_questions()
    rag = open_engine(Path(args.save_dir), make_encoder(args.encoder))
    rag.encoder.encode(["warm-up"])
    Path(args.result + ".ready").write_text("1")
    _wait_for(work / "go")
    n = empty = 0
    errors: list[str] = []
    seen: list[int] = []
    while not (work / "done").exists():
        try:
            rag.retrieve([questions[n % len(questions)]], num_to_retrieve=5)
            seen.append(len(rag.index_state))
        except RuntimeError as e:
            if "is empty" not in str(e):
                errors.append(f"{type(e).__name__}: {e}")
            else:
                empty += 1
                time.sleep(0.01)            # nothing committed yet: do not take a core from the writers
        except Exception as e:  # noqa: BLE001 - the finding itself
            where = traceback.format_exc(limit=-4) if len(errors) < 3 else ""
            errors.append(f"{type(e).__name__}: {e} (at call {n}, index size {len(rag.index_state)}){where}")
        n += 1
    final = {}
    try:
        sols = rag.retrieve([questions[0]], num_to_retrieve=args.passages)
        final = {"final_passages": len(rag.index_state), "final_returned": len(sols[0].docs)}
    except Exception as e:  # noqa: BLE001
        errors.append(f"final: {type(e).__name__}: {e}")
    Path(args.result).write_text(json.dumps({"retrievals": n, "empty": empty, "errors": errors[:20],
                                             "n_errors": len(errors), "max_seen": max(seen, default=0),
                                             "distinct_sizes_seen": len(set(seen)), **final}))
    return 0


# ----------------------------------------------------------------------------- the parent
def _spawn(args: argparse.Namespace, role: str, save_dir: Path, result: Path, half: str = "") -> subprocess.Popen:
    cmd = [sys.executable, "-m", "reproduce", "two-writers", "--role", role, "--save-dir", str(save_dir),
           "--result", str(result), "--work", str(args.work), "--encoder", args.encoder, "--batch", str(args.batch),
           "--passages", str(args.passages)] + (["--half", half] if half else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    log = open(result.with_suffix(".log"), "w")   # noqa: SIM115 - closed with the process
    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def interleaving(spans_a: list, spans_b: list) -> int:
    """How many times the writer of consecutive index() calls changed (0: one ran entirely first)."""
    calls = sorted([(s[0], "a") for s in spans_a] + [(s[0], "b") for s in spans_b])
    return sum(1 for x, y in zip(calls, calls[1:], strict=False) if x[1] != y[1])


def trial(args: argparse.Namespace, k: int, clean: dict, clean_stats: dict) -> dict:
    """One trial: two writers and a reader on a fresh folder, then the comparison."""
    work = Path(args.work)
    for f in ("go", "done"):
        (work / f).unlink(missing_ok=True)
    tdir = work / f"trial{k}"
    shutil.rmtree(tdir, ignore_errors=True)
    tdir.mkdir()
    save = tdir / "index"
    res = {r: tdir / f"{r}.json" for r in ("a", "b", "reader")}
    t0 = time.perf_counter()
    procs = {r: _spawn(args, "reader" if r == "reader" else "writer", save, res[r], "" if r == "reader" else r)
             for r in ("reader", "a", "b")}
    for r, p in procs.items():
        ready = Path(str(res[r]) + ".ready")
        while not ready.exists():
            if p.poll() is not None:
                raise RuntimeError(f"{r} exited with {p.returncode}: {res[r].with_suffix('.log').read_text()[-2000:]}")
            time.sleep(0.05)
    (work / "go").write_text("1")
    t_go = time.perf_counter()
    rcs = {r: procs[r].wait() for r in ("a", "b")}
    write_s = time.perf_counter() - t_go
    (work / "done").write_text("1")
    rcs["reader"] = procs["reader"].wait()
    row: dict = {"trial": k, "exit": rcs, "write_s": round(write_s, 1), "total_s": round(time.perf_counter() - t0, 1)}
    for r in ("a", "b", "reader"):
        if rcs[r] != 0 or not res[r].exists():
            row.setdefault("process_errors", {})[r] = res[r].with_suffix(".log").read_text()[-1500:]
    if "process_errors" in row:
        return row
    a, b, rd = (json.loads(res[r].read_text()) for r in ("a", "b", "reader"))
    row["interleaving"] = interleaving(a["spans"], b["spans"])
    row["reader"] = rd
    rag = open_engine(save, make_encoder(args.encoder))
    row["diff"] = diff_snapshots(snapshot_index(rag), clean) + stats_diff(rag.graph_stats(), clean_stats)
    row["stats"] = rag.graph_stats()
    rag.close()
    row["ok"] = (not row["diff"] and rd["n_errors"] == 0 and rd.get("final_passages") == args.passages
                 and rd.get("final_returned") == args.passages)
    return row


def render(rows: list[dict], meta: dict, command: str) -> str:
    """The markdown report: one line per trial."""
    lines = [header("Two writers, one index", command),
             f"{meta['passages']} MuSiQue passages (released OpenIE), halves indexed by two processes in batches of "
             f"{meta['batch']}, a third retrieving; encoder {meta['encoder']}; clean build "
             f"{meta['clean_s']} s; {meta['elapsed_s']} s in all\n",
             "| trial | writers' exit | write s | interleavings | equals clean build | reader retrievals | "
             "reader errors | reader sees at the end | retrieval returns |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rd = r.get("reader", {})
        eq = "yes" if r.get("diff") == [] else ("; ".join(r["diff"][:3]) if r.get("diff") else "n/a")
        lines.append(f"| {r['trial']} | {r['exit']['a']}/{r['exit']['b']} | {r.get('write_s')} | "
                     f"{r.get('interleaving', '')} | {eq} | {rd.get('retrievals', '')} | {rd.get('n_errors', '')} | "
                     f"{rd.get('final_passages', '')} | {rd.get('final_returned', '')} |")
    ok = sum(bool(r.get("ok")) for r in rows)
    lines += ["", f"**{ok} of {len(rows)} trials** equal the clean build, with no reader error and every passage "
              "seen at the end."]
    errs = [e for r in rows for e in r.get("reader", {}).get("errors", [])] + \
        [f"{k}: {v}" for r in rows for k, v in r.get("process_errors", {}).items()]
    if errs:
        lines += ["", "Errors:", ""] + [f"* {e[:500]}" for e in errs[:10]]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the trials (or one of the processes, with the hidden ``--role``)."""
    if args.role == "writer":
        return writer(args)
    if args.role == "reader":
        return reader(args)
    t0 = time.perf_counter()
    work = Path(args.work).resolve()
    args.work = work
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    docs = musique_passages(args.passages)
    (work / "docs.json").write_text(json.dumps(docs), encoding="utf-8")
    write_openie_subset(docs, work / "openie.json")
    t = time.perf_counter()
    ref = open_engine(work / "clean", make_encoder(args.encoder))
    ref.import_openie(work / "openie.json")
    ref.index(docs)
    clean, clean_stats = snapshot_index(ref), ref.graph_stats()
    ref.close()
    clean_s = round(time.perf_counter() - t, 1)
    print(f"clean build of {len(docs)} passages: {clean_s} s, {json.dumps(clean_stats)} ({load_line()})", flush=True)
    rows = []
    for k in range(args.trials):
        rows.append(trial(args, k, clean, clean_stats))
        r = rows[-1]
        print(f"trial {k}: ok={r.get('ok')} diff={r.get('diff')} reader={r.get('reader')} "
              f"interleavings={r.get('interleaving')} write {r.get('write_s')} s ({load_line()})", flush=True)
    meta = {"passages": args.passages, "batch": args.batch, "encoder": args.encoder, "clean_s": clean_s,
            "elapsed_s": round(time.perf_counter() - t0, 1), "load": load_line(), "clean_stats": clean_stats}
    text = render(rows, meta, f"python -m reproduce {' '.join(argv)}")
    kw = {"out_dir": args.out_dir} if args.out_dir else {}
    md, js = write_reports(args.name, text, {**meta, "trials": rows}, **kw)
    print(text)
    print(f"written: {md}, {js}")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit("run: python -m reproduce two-writers")
