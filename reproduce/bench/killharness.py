"""kill -9 harness: a writer killed at random moments of ``index()`` and ``delete()``.

    python -m reproduce kill-harness [--kills 200] [--passages 60] [--seed 0] [--encoder real|fake]
                                     [--storage sqlite|postgres|falkordb]

A child process (forked from a server that has the engine's modules imported, so a restart costs
the model load, not the imports) opens an index of MuSiQue passages (released OpenIE results: no
LLM call) and indexes and deletes random batches in a loop, writing each operation to a journal
(fsync) before it starts and after it ends. The parent kills it with SIGKILL at a random moment,
then checks the index:

* readable: it opens, ``graph_stats()`` and ``retrieve()`` work (counted as unreadable otherwise);
* atomic: the passages present are those before or after the interrupted operation;
* resumed: the interrupted operation is run again; then every passage that should be there is
  (lost = 0) and nothing else is (extra = 0), and the index equals a clean build of the same
  passages (stores, graph nodes and edges, synonymy; ``diff_snapshots``);
* temporary files of interrupted writes are counted after each kill (``orphan_tmp_seen``: the
  engine removes them when a writer next takes the lock, once they are 2 s old); at the end a
  writer takes the lock once more and none may be left (``orphan_tmp_left_at_end``).

``--storage postgres|falkordb``: the index in an embedded server kept in the index folder; the
child starts it (or attaches) and a killed child leaves it running (the server runs in a session
of its own), so the check attaches to a server whose client died mid-write. After the last kill
the server is stopped and no process may be left working in its data folder
(``server_left_at_end``).

Then a new child carries on from the index as it is. Clean builds use the real encoder through a
memo of vectors (no forward pass after the first), so a kill costs about a model load.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from hippo_engine.index.diagnostics import diff_snapshots, snapshot_index

from ..harness import option, report_options
from .reliability import (
    Hung,
    MemoEncoder,
    deadline,
    header,
    journal_entry,
    load_line,
    make_encoder,
    musique_passages,
    musique_questions,
    open_engine,
    passage_id,
    read_journal,
    real_encoder,
    stats_diff,
    write_openie_subset,
    write_reports,
)
from .servers import STORAGES, data_dir, server_dirs, server_left, stop_server

#: modules the fork server imports once, so that a restarted child does not (the model classes
#: only for the real encoder)
PRELOAD = ["hippo_engine.hipporag", "hippo_engine.models.encoder", "reproduce.bench.reliability", "scipy.sparse",
           "igraph"]
PRELOAD_REAL = ["transformers", "transformers.models.bert.modeling_bert"]


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``kill-harness`` command's options."""
    ap.add_argument("--kills", type=int, default=200, help="SIGKILLs to deliver (default 200)")
    ap.add_argument("--passages", type=int, default=60, help="MuSiQue passages in play (default 60)")
    ap.add_argument("--max-batch", type=int, default=8, help="largest batch per index/delete call (default 8)")
    ap.add_argument("--max-delay", type=float, default=10.0, help="longest wait for a kill after the start of "
                    "an operation (default 10; drawn up to 1.1 x the time of an earlier operation of its kind)")
    ap.add_argument("--seed", type=int, default=0)
    option(ap, "--encoder")
    ap.add_argument("--storage", choices=STORAGES, default="sqlite",
                    help="the index's backend: sqlite (default), postgres or falkordb (an embedded server in the "
                         "index folder, started by the child and left running when it is killed; stopped at the "
                         "end)")
    ap.add_argument("--hang-timeout", type=float, default=600.0, help="seconds a kill with its check may take "
                    "before the server counts as hung, a finding that ends the run (default 600; 0: no limit)")
    ap.add_argument("--compare-every", type=int, default=1, help="clean-build comparison every N kills (default 1)")
    option(ap, "--work", default=Path("outputs/kill_harness"))
    report_options(ap, "kill_harness")


# ----------------------------------------------------------------------------- the child
def child_main(cfg: dict) -> None:
    """Index and delete random batches until killed (runs in the forked child)."""
    docs = json.loads(Path(cfg["docs"]).read_text(encoding="utf-8"))
    rag = open_engine(Path(cfg["save_dir"]), make_encoder(cfg["encoder"]), storage_backend=cfg["storage"])
    rag.encoder.encode(["warm-up"])                    # the model is loaded before the kills start
    ids = [passage_id(d) for d in docs]
    present = {i for i, pid in enumerate(ids) if rag.index_state.has_passage(pid)}
    rng = random.Random(cfg["seed"])
    journal = Path(cfg["journal"])
    Path(cfg["ready"]).write_text(str(os.getpid()))
    for k in range(10 ** 9):
        absent = sorted(set(range(len(docs))) - present)
        op = "index" if absent and (not present or rng.random() < 0.6) else "delete"
        pool = absent if op == "index" else sorted(present)
        batch = rng.sample(pool, min(len(pool), rng.randint(1, cfg["max_batch"])))
        op_id = f"{cfg['run']}-{k}"
        journal_entry(journal, {"id": op_id, "op": op, "docs": batch, "t": time.time()})
        try:
            (rag.index if op == "index" else rag.delete)([docs[i] for i in batch])
        except Exception as e:  # noqa: BLE001 - written down for the parent, then the child stops
            journal_entry(journal, {"id": op_id, "error": f"{type(e).__name__}: {e}"})
            raise
        present = present | set(batch) if op == "index" else present - set(batch)
        journal_entry(journal, {"id": op_id, "done": True, "t": time.time()})


# ----------------------------------------------------------------------------- the parent
def orphans(folder: Path) -> list[str]:
    """Temporary files in an index folder (a write cut between the temp file and the rename); the
    embedded servers' data folders are not scanned (their files are the server's own)."""
    skip = server_dirs()
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and (".tmp" in p.name or p.name.endswith("~"))
                  and not set(skip) & set(p.relative_to(folder).parts[:1]))


class Harness:
    """State of one run: the corpus, the work folder, the checking engine's encoder, counters."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.work = Path(args.work)
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        self.docs = musique_passages(args.passages)
        self.ids = [passage_id(d) for d in self.docs]
        (self.work / "docs.json").write_text(json.dumps(self.docs), encoding="utf-8")
        self.openie = write_openie_subset(self.docs, self.work / "openie.json")
        self.save_dir = self.work / "index"
        self.journal = self.work / "journal.jsonl"
        inner = make_encoder(args.encoder) or real_encoder()
        self.encoder = MemoEncoder(inner)
        self.query = musique_questions()[0]
        rag = self.open(self.save_dir)
        rag.import_openie(self.openie)
        rag.close()
        self.rows: list[dict] = []
        self.counts: Counter[str] = Counter()
        self.orphan_names: set[str] = set()     # temporary files still there after an open

    def open(self, path: Path):
        return open_engine(path, self.encoder, storage_backend=self.args.storage)

    def child_cfg(self, run: int) -> dict:
        return {"docs": str(self.work / "docs.json"), "save_dir": str(self.save_dir), "encoder": self.args.encoder,
                "seed": self.args.seed * 100_003 + run, "journal": str(self.journal), "run": run,
                "ready": str(self.work / f"ready.{run}"), "max_batch": self.args.max_batch,
                "storage": self.args.storage}

    def present(self, rag) -> set[int]:
        return {i for i, pid in enumerate(self.ids) if rag.index_state.has_passage(pid)}

    def check(self, run: int, moment: float, compare: bool) -> dict:
        """Open the index after a kill, check it, resume the interrupted operation, compare."""
        before_open = orphans(self.save_dir)
        row: dict = {"run": run, "kill_wait_s": round(moment, 3), "orphans_before_open": len(before_open)}
        expected, pending, errors = read_journal(self.journal)
        row["child_errors"] = errors
        row["phase"] = pending["op"] if pending else "between"
        try:
            rag = self.open(self.save_dir)
            stats = rag.graph_stats()
            if len(rag.index_state):
                rag.retrieve([self.query], num_to_retrieve=5)
        except Exception as e:  # noqa: BLE001 - the finding itself
            row.update(readable=False, error=f"{type(e).__name__}: {e}")
            return row
        row.update(readable=True, passages=stats.get("passage_nodes", len(rag.index_state)))
        after_open = orphans(self.save_dir)
        row["orphans_after_open"] = len(after_open)
        self.orphan_names.update(after_open)
        now = self.present(rag)
        after = set(expected)
        if pending:
            batch = set(pending["docs"])
            after = expected | batch if pending["op"] == "index" else expected - batch
        row["atomic"] = "before" if now == expected else "after" if now == after else "partial"
        if pending:                                    # resume: run the interrupted operation again
            (rag.index if pending["op"] == "index" else rag.delete)([self.docs[i] for i in pending["docs"]])
            journal_entry(self.journal, {"id": pending["id"], "done": True, "resumed_by": "parent"})
        now = self.present(rag)
        row.update(lost=len(after - now), extra=len(now - after), present=len(now))
        if compare:
            row["diff"] = self.compare(rag, sorted(now))
        rag.close()
        return row

    def compare(self, rag, present: Sequence[int]) -> list[str]:
        """Differences between the index and a clean build of the same passages (empty: equal)."""
        clean_dir = self.work / "clean"
        shutil.rmtree(clean_dir, ignore_errors=True)
        clean = self.open(clean_dir)
        clean.import_openie(self.openie)
        if present:
            clean.index([self.docs[i] for i in present])
        diff = diff_snapshots(snapshot_index(rag), snapshot_index(clean))
        if present:
            diff += stats_diff(rag.graph_stats(), clean.graph_stats())
        clean.close()
        shutil.rmtree(clean_dir, ignore_errors=True)
        return diff

    def run(self) -> dict:
        """Kill, check, restart, ``--kills`` times; returns the summary."""
        args = self.args
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD + (PRELOAD_REAL if args.encoder == "real" else []))
        rng = random.Random(args.seed)
        t0 = time.perf_counter()
        for run in range(args.kills):
            children: list = []
            try:
                with deadline(args.hang_timeout, f"kill {run} (child start, the kill, the check)"):
                    row = self.one_kill(ctx, rng, run, children)
            except Hung as e:                         # a server that stopped answering: the finding
                row = {"run": run, "readable": False, "hung": True, "error": str(e)}
                for p in children:
                    if p.pid is not None:                 # started before the deadline rang
                        p.kill()
            self.rows.append(row)
            self._count(row)
            if (run + 1) % 10 == 0 or not row.get("readable") or row.get("lost") or row.get("diff"):
                print(f"[{run + 1}/{args.kills}] {dict(self.counts)} ({time.perf_counter() - t0:.0f} s, "
                      f"{load_line()})", flush=True)
            if not row.get("readable"):
                print(f"    unreadable after kill {run}: {row.get('error')}", flush=True)
                break
        ended = self.counts["unreadable"] > 0         # no writer can open an index whose server hangs
        self.counts["orphan_tmp_left_at_end"] = len(orphans(self.save_dir) if ended else self.final_orphans())
        self.stop_servers()
        return self.summary(time.perf_counter() - t0)

    def stop_servers(self) -> None:
        """Stop the embedded server a killed child left running (PostgreSQL, FalkorDB) and count
        the processes still working in its data folder afterwards (``server_left_at_end``)."""
        data = data_dir(self.args.storage, self.save_dir)
        if data is None:
            return
        stop_server(self.args.storage, self.save_dir)
        self.counts["server_left_at_end"] = len(server_left(self.args.storage, data))

    def one_kill(self, ctx, rng: random.Random, run: int, children: list) -> dict:
        """Start a child (appended to ``children``), kill it at a random moment, check the index."""
        cfg = self.child_cfg(run)
        p = ctx.Process(target=child_main, args=(cfg,), daemon=True)
        children.append(p)
        t_start = time.perf_counter()
        p.start()
        ready = Path(cfg["ready"])
        while not ready.exists() and p.is_alive():
            time.sleep(0.01)
        startup = time.perf_counter() - t_start
        moment = self.wait_and_pick(rng, run, p)
        killed = p.is_alive()
        if killed:
            os.kill(p.pid, signal.SIGKILL)
        p.join()
        row = self.check(run, moment, compare=(run + 1) % self.args.compare_every == 0)
        row.update(child_startup_s=round(startup, 2), killed=killed, exitcode=p.exitcode)
        return row

    def final_orphans(self) -> list[str]:
        """Temp files left once a writer has taken the lock with every orphan old enough to go."""
        from hippo_engine.store import files
        time.sleep(getattr(files, "MIN_AGE_S", 2.0) + 0.3)
        rag = self.open(self.save_dir)
        with rag.index_state.lock.held():
            pass
        rag.close()
        return orphans(self.save_dir)

    def scan(self) -> tuple[dict[str, list[float]], set[str], dict | None]:
        """From the journal: seconds each finished child operation took (per kind), the ids of
        finished operations, and the operation under way (None between operations)."""
        starts: dict[str, dict] = {}
        durs: dict[str, list[float]] = {"index": [], "delete": []}
        done: set[str] = set()
        for line in self.journal.read_text(encoding="utf-8").splitlines() if self.journal.exists() else []:
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "op" in e:
                starts[e["id"]] = e
            elif e.get("id") in starts:
                done.add(e["id"])
                op = starts[e["id"]]
                if e.get("done") and e.get("t") and op.get("t"):
                    durs[op["op"]].append(e["t"] - op["t"])
        pending = next((op for k, op in reversed(starts.items()) if k not in done), None)
        return durs, done, pending

    def wait_and_pick(self, rng: random.Random, run: int, p) -> float:
        """Let the child finish 0 to 2 operations; when the next one starts, kill it at a random
        point of a duration drawn from earlier operations of its kind (times 1.1, at most
        ``--max-delay``), so kills fall anywhere in index and delete calls alike. Returns the
        seconds from the start of that operation to the kill."""
        skip = rng.randint(0, 2)
        while p.is_alive():
            durs, done, pending = self.scan()
            if sum(1 for d in done if d.startswith(f"{run}-")) >= skip and pending and \
                    pending["id"].startswith(f"{run}-"):
                break
            time.sleep(0.005)
        else:
            return 0.0
        past = durs[pending["op"]][-100:]
        d = rng.choice(past) if past else (2.0 if pending["op"] == "index" else 0.5)
        moment = rng.uniform(0.0, min(self.args.max_delay, 1.1 * d))
        time.sleep(max(0.0, pending["t"] + moment - time.time()))
        return moment

    def _count(self, row: dict) -> None:
        c = self.counts
        c["kills"] += bool(row.get("killed"))
        c["unreadable"] += not row.get("readable")
        c["hung"] += bool(row.get("hung"))
        if row.get("hung"):                        # nothing else is known of that kill
            return
        c[f"phase_{row.get('phase')}"] += 1
        c[f"atomic_{row.get('atomic')}"] += 1
        c["lost_docs"] += row.get("lost", 0)
        c["extra_docs"] += row.get("extra", 0)
        c["compared"] += "diff" in row
        c["not_equal_clean"] += bool(row.get("diff"))
        c["child_errors"] += len(row.get("child_errors", []))
        c["orphan_tmp_seen"] = len(self.orphan_names)
        c["exited_before_kill"] += not row.get("killed")

    def summary(self, elapsed: float) -> dict:
        starts = [r["child_startup_s"] for r in self.rows if "child_startup_s" in r]
        durs = sorted(x for v in self.scan()[0].values() for x in v)
        return {"op_s_median": round(durs[len(durs) // 2], 3) if durs else None, "ops_finished": len(durs),
                "counts": dict(self.counts), "elapsed_s": round(elapsed, 1), "load": load_line(),
                "child_startup_s_median": sorted(starts)[len(starts) // 2] if starts else None,
                "orphan_files_seen": sorted(self.orphan_names)[:50],
                "passages": self.args.passages, "encoder": self.args.encoder, "seed": self.args.seed,
                "storage": self.args.storage,
                "rows": self.rows}


def render(summary: dict, command: str) -> str:
    """The markdown report."""
    c = summary["counts"]
    lines = [header("kill -9 harness", command),
             f"{summary['passages']} MuSiQue passages, storage {summary.get('storage', 'sqlite')}, encoder "
             f"{summary['encoder']}, seed {summary['seed']}; "
             f"{summary['elapsed_s']} s in all, child start {summary['child_startup_s_median']} s (median), "
             f"{summary['ops_finished']} operations finished by the children, {summary['op_s_median']} s each "
             "(median)\n",
             "| figure | value |", "|---|---|"]
    for key in ("kills", "unreadable", "hung", "phase_index", "phase_delete", "phase_between", "atomic_before",
                "atomic_after", "atomic_partial", "lost_docs", "extra_docs", "compared", "not_equal_clean",
                "child_errors", "orphan_tmp_seen", "orphan_tmp_left_at_end", "server_left_at_end",
                "exited_before_kill"):
        lines.append(f"| {key} | {c.get(key, 0)} |")
    bad = [r for r in summary["rows"] if not r.get("readable") or r.get("lost") or r.get("extra") or r.get("diff")
           or r.get("child_errors") or r.get("atomic") == "partial"]
    if bad:
        lines += ["", "Runs with a finding:", ""] + [f"* {json.dumps(r)}" for r in bad[:20]]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the harness, print and write the report; exit 1 on any finding."""
    summary = Harness(args).run()
    text = render(summary, f"python -m reproduce {' '.join(argv)}")
    kw = {"out_dir": args.out_dir} if args.out_dir else {}
    md, js = write_reports(args.name, text, summary, **kw)
    print(text)
    print(f"written: {md}, {js}")
    c = summary["counts"]
    bad = (c.get("unreadable", 0) + c.get("lost_docs", 0) + c.get("extra_docs", 0) + c.get("not_equal_clean", 0)
           + c.get("child_errors", 0) + c.get("atomic_partial", 0) + c.get("orphan_tmp_left_at_end", 0)
           + c.get("server_left_at_end", 0))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit("run: python -m reproduce kill-harness")
