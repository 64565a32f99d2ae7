"""An embedded server in many hands: two processes, each with its own ``HippoRAG(dir, storage=...)``
on one embedded PostgreSQL (issue 20) or FalkorDB (issue 42) server.

    python -m reproduce pg-sharing [--storage postgres|falkordb] [--runs 20] [--kill-runs 20] [--docs 8]
                                   [--work outputs/pg_sharing]

Two worker processes (the engine imported once each, the tests' n-gram encoder and scripted
OpenIE: no model, no LLM) open a new ``HippoRAG`` per run on a folder whose server is stopped,
and the parent drives them through each scenario ``--runs`` times:

* ``reader + writer``: both open at once; the reader retrieves in a loop while the writer indexes
  ``--docs`` new documents and closes; the reader goes on after the writer's close, then must see
  every document;
* ``two writers``: both open at once and index their own documents at the same time, each
  closing as soon as it is done; one reopens and must see all of them;
* ``one closing early``: both open at once; one closes at once while the other indexes,
  retrieves and closes.

A run fails on any error in either process, a document not seen, or a server still running
after both closed (the last one out stops it). Then ``killed starter`` (``--kill-runs`` times):
a new process opens the stopped folder (it starts the server), indexes, and is killed with
SIGKILL; the other worker opens (it attaches to the orphaned server), retrieves and closes: no
process of the server may remain (postmaster gone, no process working in the data directory).

``--storage falkordb``: the same scenarios on the embedded FalkorDB server of the index folder
(``falkordb/``: its ``redis-server``, users counted across processes the same way); the report is
named ``falkordb_sharing`` unless ``--name`` says otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..common import REPO_ROOT
from ..harness import option, report_options
from .reliability import RELIABILITY_DIR, Hung, deadline, header, load_line, write_reports
from .servers import SERVER_STORAGES, TITLES, data_dir, orphan_running, server_left, stop_server

SCENARIOS = ("reader + writer", "two writers", "one closing early")
#: the report's default name per backend
REPORT_NAMES = {"postgres": "pg_sharing", "falkordb": "falkordb_sharing"}
WORDS = ("Alder", "Brill", "Corven", "Dunmere", "Elska", "Fenwick", "Garrow", "Hollis", "Ivra", "Jessup",
         "Kestrel", "Lorne", "Marrick", "Norrow", "Osric", "Pell", "Quarry", "Rusk", "Selden", "Tarrow")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``pg-sharing`` command's options."""
    ap.add_argument("--storage", choices=SERVER_STORAGES, default="postgres",
                    help="the embedded server shared: postgres (default) or falkordb")
    ap.add_argument("--runs", type=int, default=20, help="runs of each two-process scenario (default 20)")
    ap.add_argument("--kill-runs", type=int, default=20, help="runs of the killed-starter scenario (default 20)")
    ap.add_argument("--hang-timeout", type=float, default=300.0, help="seconds a run may take before the server "
                    "counts as hung, a failure that ends the benchmark (default 300; 0: no limit)")
    ap.add_argument("--docs", type=int, default=8, help="documents a writer indexes per run (default 8)")
    option(ap, "--work", default=Path("outputs/pg_sharing"))
    report_options(ap, REPORT_NAMES["postgres"], "--role", "--save-dir")


def report_name(args: argparse.Namespace) -> str:
    """``--name``, or where it was left at its default, the default of the backend (``falkordb_sharing``)."""
    return REPORT_NAMES[args.storage] if args.name == REPORT_NAMES["postgres"] else args.name


def make_docs(tag: str, n: int) -> tuple[list[str], list[str]]:
    """``n`` toy documents (the scripted OpenIE finds their capitalised names) and their ids."""
    docs = []
    for i in range(n):
        a, b, c = (WORDS[(i * 7 + k * 3 + len(tag)) % len(WORDS)] for k in range(3))
        docs.append(f"{a} {tag.title()} {i}\n{a} Hall lies in {b} Vale. {c} Mott founded {a} Hall in {1800 + i}.")
    return docs, [f"{tag}-{i}" for i in range(n)]


# ----------------------------------------------------------------------------- the worker process
def _open(save_dir: Path, storage: str):
    tests = str(REPO_ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    from fakes import NgramEncoder, ScriptedLLM
    from helpers import toy_respond

    from hippo_engine import HippoRAG
    return HippoRAG(save_dir, storage=storage, llm=ScriptedLLM(toy_respond), encoder=NgramEncoder(),
                    extractor="openie", show_progress=False, use_filter=False)


def _seen(rag) -> int:
    rag.index_state.refresh()
    return len(rag.index_state)


def _read_until(rag, stop: Path) -> dict:
    """Retrieve until ``stop`` exists; every exception but "the index is empty" is an error."""
    n, errors = 0, []
    while not stop.exists() or n == 0:
        try:
            rag.retrieve(["Who founded Alder Hall?"], num_to_retrieve=3)
        except RuntimeError as e:
            if "is empty" not in str(e):
                errors.append(f"{type(e).__name__}: {e}")
            time.sleep(0.01)
        except Exception as e:  # noqa: BLE001 - the finding itself
            errors.append(f"{type(e).__name__}: {e}")
        n += 1
    return {"retrievals": n, "errors": errors[:5], "n_errors": len(errors)}


def _do(rag, save_dir: Path, storage: str, cmd: dict):
    """One command of the parent; returns (the engine object, the reply)."""
    op = cmd["op"]
    if op == "open":
        rag = _open(save_dir, storage)
        server = rag.index_state.db.owned_server
        return rag, {"started": bool(server is not None and server.started), "seen": _seen(rag)}
    if op == "index":
        return rag, {"added": rag.index(cmd["docs"], ids=cmd["ids"])["added"]}
    if op == "read":
        return rag, _read_until(rag, Path(cmd["stop"]))
    if op == "seen":
        return rag, {"seen": _seen(rag)}
    if op == "close":
        rag.close()
        return None, {}
    raise ValueError(f"unknown command {op!r}")


def worker(args: argparse.Namespace) -> int:
    """Answer the parent's commands, one JSON line each, until stdin ends."""
    rag = None
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            rag, out = _do(rag, Path(args.save_dir), args.storage, json.loads(line))
        except Exception as e:  # noqa: BLE001 - reported to the parent
            out = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(out), flush=True)
    return 0


# ----------------------------------------------------------------------------- the parent
class Worker:
    """A worker process on ``save_dir`` (its index on ``storage``), driven command by command."""

    def __init__(self, save_dir: Path, log: Path, storage: str):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
        cmd = [sys.executable, "-m", "reproduce", "pg-sharing", "--role", "worker", "--save-dir", str(save_dir),
               "--storage", storage]
        self.log = open(log, "a")   # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, text=True, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log)
        self.reply()

    def send(self, op: str, **kw) -> None:
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()

    def reply(self) -> dict:
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"error": f"the worker exited ({self.proc.wait()})"}

    def __call__(self, op: str, **kw) -> dict:
        self.send(op, **kw)
        return self.reply()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.log.close()

    def end(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.log.close()


def both(a: Worker, b: Worker, op: str, for_a: dict | None = None, for_b: dict | None = None) -> list[dict]:
    """A command to both workers at once (``for_a`` / ``for_b``: the arguments of each)."""
    a.send(op, **(for_a or {}))
    b.send(op, **(for_b or {}))
    return [a.reply(), b.reply()]


class Failures(list):
    """The failures of a run (and, for a reader, how many retrievals it made)."""

    retrievals = 0


def _errors(replies: list[dict]) -> Failures:
    return Failures([r["error"] for r in replies if "error" in r] + [e for r in replies for e in r.get("errors", [])])


def reader_writer(a: Worker, b: Worker, run: int, stop: Path, total: int, docs: int) -> tuple[Failures, int]:
    """``b`` reads throughout while ``a`` indexes and closes; returns failures and the new total."""
    fails = _errors(both(a, b, "open"))
    stop.unlink(missing_ok=True)
    b.send("read", stop=str(stop))
    texts, ids = make_docs(f"rw{run}", docs)
    fails += _errors([a("index", docs=texts[: docs // 2], ids=ids[: docs // 2]),
                      a("index", docs=texts[docs // 2:], ids=ids[docs // 2:]), a("close")])
    time.sleep(0.3)                                   # the reader goes on after the writer's close
    stop.write_text("1")
    read = b.reply()
    fails += _errors([read])
    fails.retrievals = read.get("retrievals", 0)
    seen = b("seen")
    fails += _errors([seen, b("close")])
    if seen.get("seen") != total + docs:
        fails.append(f"the reader sees {seen.get('seen')} documents, {total + docs} written")
    return fails, total + docs


def two_writers(a: Worker, b: Worker, run: int, stop: Path, total: int, docs: int) -> tuple[Failures, int]:
    """Both index their own documents at once and each closes as soon as it is done (while the
    other may still write); then one reopens and must see every document."""
    fails = _errors(both(a, b, "open"))
    (ta, ia), (tb, ib) = make_docs(f"wa{run}", docs), make_docs(f"wb{run}", docs)
    a.send("index", docs=ta, ids=ia)
    b.send("index", docs=tb, ids=ib)
    for w in (a, b):
        w.send("close")
    fails += _errors([a.reply(), b.reply(), a.reply(), b.reply()])
    seen = a("open")
    fails += _errors([seen, a("close")])
    if seen.get("seen") != total + 2 * docs:
        fails.append(f"a writer sees {seen.get('seen')} documents, {total + 2 * docs} written")
    return fails, total + 2 * docs


def early_close(a: Worker, b: Worker, run: int, stop: Path, total: int, docs: int) -> tuple[Failures, int]:
    """``a`` closes as soon as both opened; ``b`` indexes, retrieves and closes after it."""
    fails = _errors(both(a, b, "open"))
    fails += _errors([a("close")])
    texts, ids = make_docs(f"ec{run}", docs)
    fails += _errors([b("index", docs=texts, ids=ids)])
    stop.write_text("1")
    fails += _errors([b("read", stop=str(stop)), b("close")])
    return fails, total + docs


def killed_starter(save: Path, user: Worker, run: int, log: Path, docs: int, storage: str) -> dict:
    """A new process starts the server and is killed; ``user`` attaches and closes."""
    t = time.perf_counter()
    starter = Worker(save, log, storage)
    opened = starter("open")
    texts, ids = make_docs(f"ks{run}", docs)
    indexed = starter("index", docs=texts, ids=ids)
    starter.kill()
    data = data_dir(storage, save)
    orphan = orphan_running(storage, data)
    got = user("open")
    fails = _errors([opened, indexed, got, user("read", stop="/"), user("close")])
    if not opened.get("started"):
        fails.append("the killed process had not started the server")
    if got.get("started"):
        fails.append("the next user started a new server (the orphan was gone)")
    fails += server_left(storage, data)
    return {"run": run, "orphan_after_kill": orphan, "failures": fails, "s": round(time.perf_counter() - t, 2)}


def run(args: argparse.Namespace, argv) -> int:
    """The harness (or, with ``--role worker``, one worker process)."""
    if args.role == "worker":
        return worker(args)
    work = Path(args.work).absolute()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    work.chmod(0o711)                                  # the server's user must traverse it when root
    save, log, stop = work / "index", work / "workers.log", work / "stop"
    t0 = time.perf_counter()
    a, b = Worker(save, log, args.storage), Worker(save, log, args.storage)
    rows, kills = [], []
    try:
        scenarios(args, a, b, save, stop, rows, t0)
        a.end()
        for k in range(args.kill_runs):
            with deadline(args.hang_timeout, f"killed starter run {k}"):
                kills.append(killed_starter(save, b, k, log, args.docs, args.storage))
            print(f"killed starter {k}: {kills[-1]['failures'] or 'ok'}", flush=True)
        b.end()
    except Hung as e:                       # a server that stopped answering: the finding ends the run
        print(f"hung: {e}", flush=True)
        rows.append({"scenario": "hung", "run": len(rows) + len(kills), "s": args.hang_timeout, "failures": [str(e)],
                     "retrievals": 0})
        for w in (a, b):
            w.kill()
        stop_server(args.storage, save)
    return report(args, argv, rows, kills, time.perf_counter() - t0)


def scenarios(args: argparse.Namespace, a: Worker, b: Worker, save: Path, stop: Path, rows: list, t0: float) -> None:
    """The two-process scenarios, ``--runs`` times each, their rows appended to ``rows``; each run
    under the hang deadline."""
    total = 0
    for name, fn in zip(SCENARIOS, (reader_writer, two_writers, early_close), strict=True):
        for k in range(args.runs):
            t = time.perf_counter()
            with deadline(args.hang_timeout, f"{name} run {k}"):
                fails, total = fn(a, b, k, stop, total, args.docs)
                fails += server_left(args.storage, data_dir(args.storage, save))
            rows.append({"scenario": name, "run": k, "s": round(time.perf_counter() - t, 2), "failures": list(fails),
                         "retrievals": getattr(fails, "retrievals", 0)})
            print(f"{name} {k}: {'ok' if not fails else fails} ({time.perf_counter() - t0:.0f} s)", flush=True)


def report(args: argparse.Namespace, argv, rows: list[dict], kills: list[dict], wall: float) -> int:
    """Write the markdown table and the JSON; exit 1 if any run failed."""
    lines = [header(f"{TITLES[args.storage]} in many hands: two processes on one embedded server",
                    " ".join(["python -m reproduce pg-sharing", *argv[1:]])),
             f"{os.cpu_count()} cores; {wall:.0f} s in all; {args.docs} documents per writer and run "
             "(n-gram encoder, scripted OpenIE: the server, not the models, is under test)", "",
             "| scenario | runs | failed | s per run (median) |", "|---|---|---|---|"]
    for name in SCENARIOS:
        mine = [r for r in rows if r["scenario"] == name]
        secs = sorted(r["s"] for r in mine)
        lines.append(f"| {name} | {len(mine)} | {sum(bool(r['failures']) for r in mine)} | "
                     f"{secs[len(secs) // 2] if secs else 0:.2f} |")
    secs = sorted(k["s"] for k in kills)
    lines.append(f"| killed starter (SIGKILL), next user's close stops the server | {len(kills)} | "
                 f"{sum(bool(k['failures']) for k in kills)} | {secs[len(secs) // 2] if secs else 0:.2f} |")
    failed = [r for r in rows + kills if r["failures"]]
    reads = sum(r["retrievals"] for r in rows)
    lines += ["", f"reader + writer: {reads} retrievals by the reader while the writer wrote and closed; "
              f"orphaned server running after each kill: {sum(k['orphan_after_kill'] for k in kills)} of "
              f"{len(kills)}; none left after the next user's close: "
              f"{'yes' if not any(k['failures'] for k in kills) else 'no'}", f"{load_line()} at the end"]
    lines += [f"- {r.get('scenario', 'killed starter')} run {r['run']}: {r['failures'][:3]}" for r in failed[:20]]
    data = {"rows": rows, "kills": kills, "wall_s": wall, "storage": args.storage}
    md, js = write_reports(report_name(args), "\n".join(lines) + "\n", data, args.out_dir or RELIABILITY_DIR)
    print(md.read_text(encoding="utf-8"))
    return 1 if failed else 0
