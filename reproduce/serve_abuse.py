"""``python -m reproduce serve-abuse``: ``hippo-engine serve`` in hostile hands (issue 37's acceptance).

    python -m reproduce serve-abuse [--phases answers sockets workspaces] [--quick] [--engine-dir DIR]

Three phases, each against a fresh ``hippo-engine serve`` (SQLite, ``extractor=ner``, filter off) started as
a subprocess on a free port of 127.0.0.1 under ``bash -c 'ulimit -n N; exec hippo-engine serve ...'``, its
stdout and stderr in ``<work>/<phase>.log``:

1. **answers**: the reader LLM is a scripted OpenAI-compatible server on 127.0.0.1 that takes
   ``--llm-delay`` (20) seconds a call and records when each call arrives and when its client (the
   service) closes the connection (:mod:`.serve_abuse_llm`). The sample corpus is indexed, the idle p95 of
   ``/retrieve`` measured (``--idle-retrieves`` in turn), one answer waited for (untagged, the LLM replies
   at once: the reader's first use is a warm-up), then ``--answers`` (200) ``POST /answer`` are sent
   from ``--answer-clients`` (40) sockets, each closed ``--leave-after`` (1) s after its request (every
   ``1/--stream-share``-th asks for the event stream), and watched ``--observe`` s more. Meanwhile
   ``/health`` is probed every 0.1 s (each on a new connection, on time whatever the ones before did, from
   a process of its own: :mod:`.serve_abuse_probe`) and
   ``/retrieve`` every 0.25 s after the last answered (a keep-alive client). Targets:
   ``/health`` p99 < 100 ms and ``/retrieve`` p95 <= 2x idle over the whole window (a probe without a 200
   counts as its 5 s timeout), and 0 LLM calls running 1 s after their client left (the LLM's own record;
   a call that starts after that counts too). 503s (the answer cap) are counted, and expected.
2. **sockets** (``ulimit -n 256``): ``--idle-sockets`` (300) connections that send nothing and
   ``--slow-sockets`` (50) that send a header line every ``--slow-interval`` (3) s, held ``--slow-seconds``
   (30) s and watched for the server answering or closing them; ``/health`` probed every 0.2 s as in 1.
   Targets: every probe answered (an HTTP status within 5 s), the log under 1 MB.
3. **workspaces** (``ulimit -n 1024``): ``--workspaces`` (500) workspaces created in turn by ``POST
   /w/ws-NNN/documents`` (one small document, its job followed), a document added to the default workspace
   every ``--default-every`` (25) of them; the server's RSS, threads and descriptors read from /proc after
   each. Then every document of the default workspace and of ``--recheck`` (20) earlier workspaces is
   listed. Targets: no 5xx (nor a request without an answer), no document of another workspace
   ``failed``, RSS growth per workspace created, over the second half of those created, under
   ``--rss-slope-mb`` (0.5) MB (about 20 to 45 MB each when workspaces are never closed).

``--quick`` shrinks every count and duration (a test's run). ``--engine-dir DIR`` runs the server from
another checkout (``python -c 'from hippo_engine.cli import main'`` with DIR as the working directory:
e.g. a worktree of an older commit, for before/after figures). Writes ``reproduce/results/serve/abuse.md``
and ``abuse.json``; exits 1 when a target is missed. Every figure is measured; none is assumed.
"""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import serve_abuse_phases as phases
from .common import REPO_ROOT
from .serve_abuse_llm import SlowLLM
from .serve_abuse_probe import ProbeProcess
from .serve_abuse_report import render, summarize_answers, summarize_sockets, summarize_workspaces, targets
from .serve_common import sample_corpus
from .serve_harness import OUT_DIR, ServerProcess, command_line, redact, serve_command, uptime

PHASES = ("answers", "sockets", "workspaces")
#: option -> (full run, --quick), help
SIZES: dict[str, tuple[tuple[float, float], str]] = {
    "answers": ((200, 8), "abandoned POST /answer calls"),
    "answer_clients": ((40, 4), "sockets sending them at once"),
    "leave_after": ((1.0, 1.0), "seconds after its request when a client leaves"),
    "llm_delay": ((20.0, 4.0), "seconds the scripted LLM takes a call"),
    "stream_share": ((0.5, 0.5), "share of answers asking for the event stream"),
    "idle_retrieves": ((40, 10), "retrieves in turn for the idle p95"),
    "observe": ((25.0, 3.0), "seconds of probing after the last client left"),
    "grace": ((1.0, 1.0), "seconds after its client left when an LLM call counts as left running"),
    "socket_fd_limit": ((256, 256), "ulimit -n of the sockets phase's server"),
    "idle_sockets": ((300, 30), "idle sockets"),
    "slow_sockets": ((50, 4), "slow-header sockets"),
    "slow_seconds": ((30.0, 4.0), "seconds the sockets are held"),
    "slow_interval": ((3.0, 1.0), "seconds between two header lines of a slow socket"),
    "recovery": ((5.0, 1.0), "seconds of /health probes after the sockets closed"),
    "workspace_fd_limit": ((1024, 1024), "ulimit -n of the workspaces phase's server"),
    "workspaces": ((500, 6), "workspaces created in turn"),
    "default_every": ((25, 3), "a document to the default workspace every this many workspaces"),
    "recheck": ((20, 3), "earlier workspaces whose documents are listed at the end"),
    "job_timeout": ((60.0, 60.0), "seconds a workspace's job may take"),
    "workspace_time_limit": ((1500.0, 300.0), "seconds the workspaces phase may last"),
}
#: the targets' thresholds: option -> (value, help)
LIMITS = {"health_p99_ms": (100.0, "/health p99 target (ms)"), "retrieve_ratio": (2.0, "/retrieve p95 over idle"),
          "log_limit_mb": (1.0, "the sockets phase's log (MB)"),
          "rss_slope_mb": (0.5, "RSS growth per workspace over the second half (MB)")}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``serve-abuse`` command's options."""
    ap.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES), help="which phases (default all)")
    ap.add_argument("--quick", action="store_true", help="small counts and durations (a test's run)")
    for name, ((full, quick), text) in SIZES.items():
        kind = int if isinstance(full, int) else float
        ap.add_argument("--" + name.replace("_", "-"), type=kind, default=None,
                        help=f"{text} (default {full}; --quick: {quick})")
    for name, (value, text) in LIMITS.items():
        ap.add_argument("--" + name.replace("_", "-"), type=float, default=value, help=f"{text} (default {value})")
    ap.add_argument("--rss-stop-mb", type=float, default=8000.0, help="stop creating workspaces when the server's "
                    "RSS passes this (a guard for the machine; default 8000)")
    ap.add_argument("--engine-dir", type=Path, default=None, help="run the server from this checkout's "
                    "hippo_engine (default: this interpreter's installation)")
    ap.add_argument("--work", type=Path, default=Path("outputs/serve/abuse"), help="index folders and server logs")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "abuse.md", help="the report (and .json beside it)")


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the sizes not given with the full run's or ``--quick``'s."""
    for name, ((full, quick), _) in SIZES.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    return args


# ----------------------------------------------------------------------------- the server
def engine_command(engine_dir: Path | None) -> tuple[list[str], Path]:
    """How to run ``hippo-engine`` and from where: the installed command from this repository, or this
    interpreter importing ``hippo_engine`` from ``engine_dir`` (first on its path as the working directory)."""
    if engine_dir is None:
        return serve_command(), REPO_ROOT
    return [sys.executable, "-c", "import sys; from hippo_engine.cli import main; sys.exit(main())"], engine_dir


def start_server(args: argparse.Namespace, name: str, fd_limit: int, extra: Sequence[str] = ()) -> ServerProcess:
    """A fresh ``serve`` on an empty index folder ``<work>/<name>`` under ``ulimit -n fd_limit``, started and
    ready (its log ``<work>/<name>.log``, emptied first)."""
    save, log = args.work / name, args.work / f"{name}.log"
    shutil.rmtree(save, ignore_errors=True)
    log.unlink(missing_ok=True)
    server = ServerProcess(save, log, extra=extra)
    installed = serve_command()
    command, cwd = engine_command(args.engine_dir)
    server.args = ["bash", "-c", 'ulimit -n "$1" && cd "$2" && shift 2 && exec "$@"', "serve-abuse",
                   str(fd_limit), str(cwd), *command, *server.args[len(installed):]]
    server.start()
    try:
        server.wait_ready()
    except BaseException:
        server.kill()
        raise
    return server


def stop(server: ServerProcess) -> int | None:
    """A graceful stop, SIGKILL after 20 s (a server still busy with abandoned work may not stop)."""
    return server.stop(timeout=20)


# ----------------------------------------------------------------------------- phases
def index_sample(url: str, timeout: float = 600.0) -> dict:
    """Add the sample corpus to the default workspace and wait for its job."""
    import httpx
    docs, questions = sample_corpus()
    with httpx.Client(base_url=url, timeout=60.0) as c:
        r = c.post("/documents", json={"documents": docs})
        r.raise_for_status()
        outcome = phases.follow_job(c, "", r.json()["job_id"], timeout)
    if outcome != "done":
        raise RuntimeError(f"the sample corpus was not indexed: {outcome}")
    return {"documents": len(docs), "questions": [q["question"] for q in questions]}


def phase_answers(args: argparse.Namespace, log=print) -> dict:
    """Phase 1 (see the module docstring)."""
    with SlowLLM(args.llm_delay) as llm:
        extra = ["--llm-base-url", llm.base_url, "--llm", "scripted-reader", "--api-key", "none"]
        server = start_server(args, "answers", 4096, extra)
        try:
            sample = index_sample(server.url)
            questions = sample["questions"]
            retrieve = {"query": questions[0], "top_k": 5}
            idle = phases.Prober(server.url, "POST", "/retrieve", 0.0, body=retrieve, timeout=30.0)
            import httpx
            with httpx.Client(base_url=server.url, timeout=30.0) as c:
                for _ in range(5):                                  # warm up (the graph loads on first use)
                    idle.once(c)
                idle_probes = [idle.once(c) for _ in range(args.idle_retrieves)]
                warm = idle_answer(c, questions[1])
            log(f"answers: idle /retrieve measured; sending {args.answers} abandoned answers")
            health = ProbeProcess(server.url, "/health", 0.1, phases.PROBE_TIMEOUT).start()
            busy = phases.Prober(server.url, "POST", "/retrieve", 0.25, body=retrieve, timeout=30.0).start()
            t0 = time.monotonic()
            answers = phases.abandoned_answers(server.port, questions, args.answers, args.answer_clients,
                                               args.leave_after, args.stream_share)
            t_sent = time.monotonic()
            time.sleep(args.observe)
            t_end = time.monotonic()
            probes = {"health": health.stop(), "retrieve": busy.stop()}
            calls = llm.calls()
        finally:
            exit_code = stop(server)
    running = phases.left_running(answers, calls, args.grace, t_end)
    return summarize_answers(args, idle_probes, probes, answers, running, (t0, t_sent, t_end)) | {
        "server_exit": exit_code, "documents": sample["documents"], "warm_up_answer": warm}


def idle_answer(client, question: str) -> dict:
    """One answer waited for (untagged: the scripted LLM replies at once), before the load: the reader's
    first use (its client built, its modules imported) is not what the phase measures."""
    t = time.monotonic()
    r = client.post("/answer", json={"question": question, "top_k": 3})
    return {"status": r.status_code, "seconds": round(time.monotonic() - t, 2),
            "answer": r.json().get("answer") if r.status_code == 200 else r.text[:200]}


def phase_sockets(args: argparse.Namespace, log=print) -> dict:
    """Phase 2 (see the module docstring)."""
    server = start_server(args, "sockets", args.socket_fd_limit)
    try:
        health = ProbeProcess(server.url, "/health", 0.2, phases.PROBE_TIMEOUT).start()
        t0 = time.monotonic()
        log(f"sockets: {args.idle_sockets} idle and {args.slow_sockets} slow sockets for {args.slow_seconds:g} s")
        socks = phases.sockets(server.port, args.idle_sockets, args.slow_sockets, args.slow_seconds,
                               args.slow_interval)
        t1 = time.monotonic()
        time.sleep(args.recovery)
        probes = health.stop()
        alive = server.alive()
    finally:
        exit_code = stop(server)
    return summarize_sockets(args, socks, probes, (t0, t1), server.log_text()) | {
        "server_alive_at_end": alive, "server_exit": exit_code}


def phase_workspaces(args: argparse.Namespace, log=print) -> dict:
    """Phase 3 (see the module docstring)."""
    server = start_server(args, "workspaces", args.workspace_fd_limit)
    try:
        assert server.proc is not None
        log(f"workspaces: creating {args.workspaces} in turn")
        deadline = time.monotonic() + args.workspace_time_limit
        made = phases.workspaces(server.url, server.proc.pid, args.workspaces, args.default_every,
                                 args.job_timeout, deadline, args.rss_stop_mb)
        created = [r["workspace"] for r in made["rows"] if r["workspace"] != "default" and r["status"] == 202]
        step = max(1, len(created) // max(1, args.recheck))
        rechecked = created[:-1][::step][: args.recheck]
        states = phases.document_states(server.url, ["", *(f"/w/{w}" for w in rechecked)])
        time.sleep(2.0)
        final = phases.proc_sample(server.proc.pid)
    finally:
        exit_code = stop(server)
    return summarize_workspaces(args, made, states, final) | {"server_exit": exit_code}


RUNNERS = {"answers": phase_answers, "sockets": phase_sockets, "workspaces": phase_workspaces}


def engine_version(engine_dir: Path | None) -> str:
    """The commit the server ran (``+dirty`` when its checkout has changes)."""
    where = engine_dir or REPO_ROOT
    try:
        head = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--", "hippo_engine"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+dirty" if dirty else "") if head else "unknown"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the asked phases, write the report, exit 1 when a target is missed."""
    from .common import setup_logging
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    resolve(args)
    args.work.mkdir(parents=True, exist_ok=True)
    result: dict = {"command": command_line("serve-abuse", argv, args.work), "engine": engine_version(
        args.engine_dir), "uptime_before": uptime(), "phases": {}}
    for name in PHASES:
        if name in args.phases:
            t = time.monotonic()
            try:
                figures = RUNNERS[name](args)
            except Exception as e:          # a server that does not start: the phase's targets are missed
                logging.getLogger(__name__).exception("serve-abuse: the %s phase failed", name)
                figures = {"error": redact(f"{type(e).__name__}: {e}", args.work)[-3000:]}
            result["phases"][name] = figures | {"seconds": round(time.monotonic() - t, 1)}
    result["uptime_after"] = uptime()
    result["targets"] = targets(args, result["phases"])
    md = render(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(md, encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(md)
    return 0 if all(t["passed"] for t in result["targets"]) else 1


if __name__ == "__main__":
    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
