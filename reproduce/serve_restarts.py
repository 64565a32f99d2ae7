"""``python -m reproduce serve-restarts``: SIGKILL ``hippo-engine serve`` at random moments of ingestion.

    python -m reproduce serve-restarts [--storage sqlite|postgres|both] [--documents 300] [--kills 20]

``hippo-engine serve`` (1 process, ``extractor="ner"``: no LLM) runs on a fresh index folder in a process
group of its own on 127.0.0.1. A client thread posts the first ``--documents`` MuSiQue passages (ids
``mq-NNNN``) in batches of ``--batch`` through ``POST /documents``, keeping at most ``--queue`` accepted
documents waiting for the background indexer (batches of ``--index-batch``). Each run but the last is ended
by SIGKILL to the server's whole process group at a seeded random moment: a few before the server is ready
(``--early-share``: while it loads its models or recovers), the others once the indexed count (``GET
/documents?status=indexed``) reaches the run's target (targets spread over the corpus, jittered) plus a
random pause of up to the time an indexing batch takes (the median step of the indexed count so far), so
that kills fall anywhere in the next batch; or (``--post-share``) up to 50 ms after the next ``POST
/documents`` is sent from then on, so that some kills hit a POST in flight. The server is started again
each time. A batch whose POST got no answer is looked up by id (``GET /documents/{id}``) after the
restart: known documents were accepted, unknown ones are posted again; nothing else is posted twice.

After the last run every accepted document must be indexed: through the API (``GET /documents`` by status,
every job ``done`` with each document ``indexed``), in the index opened in-process after a graceful stop
(each document once, one passage per document) and compared with a clean in-process build of the same
documents (``snapshot_index``/``diff_snapshots``: store rows with vectors, graph nodes, edges with weights,
synonymy, documents; and the rankings hash of the 100 MuSiQue questions, top 20).

Writes ``reproduce/results/serve/restarts.md`` and ``.json``; exits 1 on any failed check.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from .serve_harness import (
    OUT_DIR,
    ServerProcess,
    command_line,
    full_text,
    hold_postgres,
    musique_documents,
    musique_questions,
    open_engine,
    pct,
    uptime,
)
from .serve_report import render_restarts

REQUEST_TIMEOUT = 120.0


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The ``serve-restarts`` command's options."""
    ap.add_argument("--storage", choices=("sqlite", "postgres", "both"), default="sqlite",
                    help="the index's backend (default sqlite; postgres: the embedded server of the index folder)")
    ap.add_argument("--documents", type=int, default=300, help="MuSiQue passages to ingest (default 300)")
    ap.add_argument("--kills", type=int, default=20, help="SIGKILLs (default 20)")
    ap.add_argument("--batch", type=int, default=10, help="documents per POST /documents (default 10)")
    ap.add_argument("--index-batch", type=int, default=8, help="the server's indexing batch (default 8)")
    ap.add_argument("--queue", type=int, default=40, help="most accepted documents waiting (default 40)")
    ap.add_argument("--early-share", type=float, default=0.15, help="share of kills before ready (default 0.15)")
    ap.add_argument("--post-share", type=float, default=0.25,
                    help="share of kills up to 50 ms after a POST /documents was sent (default 0.25)")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--time-limit", type=float, default=3600.0, help="seconds the whole run may last (default 3600)")
    ap.add_argument("--work", type=Path, default=Path("outputs/serve/restarts"), help="index folders and logs")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "restarts.md", help="the report (and .json beside it)")


class Poster(threading.Thread):
    """Posts the batches not yet accepted while fewer than ``queue`` accepted documents wait; stops at
    :meth:`halt` or at the first request without an answer (the server was killed)."""

    def __init__(self, url: str, state: dict, queue: int):
        super().__init__(name="poster", daemon=True)
        self.url, self.state, self.queue = url, state, queue
        self.in_flight = False
        self.sending = threading.Event()        # set as each POST is sent
        self.indexed = 0
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()

    def run(self) -> None:
        import httpx
        st = self.state
        with httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT) as c:
            for k, batch in enumerate(st["batches"]):
                if st["status"][k] == "accepted":
                    continue
                while not self._halt.is_set() and len(st["accepted"]) - self.indexed >= self.queue:
                    time.sleep(0.02)
                if self._halt.is_set():
                    return
                self.in_flight = True
                st["status"][k] = "unknown"
                self.sending.set()
                try:
                    r = c.post("/documents", json={"documents": batch})
                except httpx.HTTPError:
                    return                      # killed: the batch stays "unknown"
                finally:
                    self.in_flight = False
                if r.status_code != 202:
                    st["errors"].append(f"POST /documents answered {r.status_code}: {r.text[:300]}")
                    st["status"][k] = "refused"
                    return
                st["status"][k] = "accepted"
                st["jobs"].append(r.json()["job_id"])
                st["accepted"].update(d["id"] for d in batch)


def resolve_unknown(url: str, state: dict) -> tuple[int, int]:
    """After a restart: a batch whose POST got no answer is accepted if the server knows its documents,
    else to be posted again. Returns (accepted all the same, to post again)."""
    import httpx
    kept = again = 0
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT) as c:
        for k, batch in enumerate(state["batches"]):
            if state["status"][k] != "unknown":
                continue
            known = [c.get(f"/documents/{d['id']}").status_code == 200 for d in batch]
            if all(known):
                state["status"][k] = "accepted"
                state["accepted"].update(d["id"] for d in batch)
                kept += 1
            elif not any(known):
                state["status"][k] = "todo"
                again += 1
            else:
                state["errors"].append(f"batch {k} half accepted: {known}")
    return kept, again


def indexed_total(c) -> int | None:
    """How many documents the API lists as indexed (None: no answer)."""
    import httpx
    try:
        r = c.get("/documents", params={"status": "indexed", "limit": 1})
    except httpx.HTTPError:
        return None
    return int(r.json()["total"]) if r.status_code == 200 else None


def one_run(server: ServerProcess, state: dict, args: argparse.Namespace, rng: random.Random,
            target: int | None, deadline: float, at_post: bool = False) -> dict:
    """Serve until killed (``target``: the indexed count after which to kill, or with ``at_post`` the first
    POST sent once it is reached; None: the last run, to the end)."""
    import httpx
    info: dict = {}
    info["startup_s"] = server.wait_ready()
    info["kept"], info["reposted"] = resolve_unknown(server.url, state)
    poster = Poster(server.url, state, args.queue)
    poster.start()
    last: tuple[int, float] | None = None
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as c:
        while time.monotonic() < deadline:
            n = indexed_total(c)
            if n is not None:
                poster.indexed = n
                if last is not None and n > last[0]:
                    state["steps"].append(time.monotonic() - last[1])     # one indexing batch, about
                if last is None or n > last[0]:
                    last = (n, time.monotonic())
            if target is not None and n is not None and n >= target:
                poster.sending.clear()
                if at_post and poster.is_alive() and poster.sending.wait(30.0):
                    info["pause_s"] = rng.uniform(0, 0.05)
                else:       # anywhere in the next batch: claim, extraction, embedding, commit, statuses
                    info["pause_s"] = rng.uniform(0, pct(state["steps"], 50) if state["steps"] else 1.0)
                time.sleep(info["pause_s"])
                info["mid_post"] = poster.in_flight
                server.kill()
                info["indexed_at_kill"] = n
                break
            if target is None and n == len(state["docs"]) and not poster.is_alive():
                break
            time.sleep(0.05)
    poster.halt()
    poster.join(REQUEST_TIMEOUT)
    return info


def kill_early(server: ServerProcess, rng: random.Random, startup: float) -> None:
    """SIGKILL at a random moment of the server's startup (models loading, queue recovery)."""
    time.sleep(rng.uniform(0.1, 0.95) * startup)
    server.kill()


def ingest_with_kills(storage: str, args: argparse.Namespace, log=print) -> dict:
    """All runs of one backend; returns what happened and the final checks."""
    docs = musique_documents(args.documents)
    save = args.work / storage
    if save.exists():
        shutil.rmtree(save)
    save.mkdir(parents=True)
    state: dict = {"docs": docs, "batches": [docs[i:i + args.batch] for i in range(0, len(docs), args.batch)],
             "accepted": set(), "jobs": [], "errors": [], "steps": []}
    state["status"] = ["todo"] * len(state["batches"])
    rng = random.Random(args.seed)
    targets = sorted(max(1, min(len(docs) - 1, round((i + 1) * len(docs) / (args.kills + 1)) + rng.randint(-3, 3)))
                     for i in range(args.kills))
    out = {"storage": storage, "documents": len(docs), "batch": args.batch, "index_batch": args.index_batch,
           "kills": 0, "kills_before_ready": 0, "kills_mid_post": 0, "lost_but_accepted": 0, "reposted": 0,
           "indexed_at_kills": [], "pauses_s": [], "startups": [], "uptime_before": uptime()}
    held = hold_postgres(save) if storage == "postgres" else None
    t0, deadline = time.monotonic(), time.monotonic() + args.time_limit
    try:
        for run in range(args.kills + 1):
            last = run == args.kills
            server = ServerProcess(save, args.work / f"server_{storage}.log", storage=storage,
                                   extra=["--index-batch", str(args.index_batch)]).start()
            draw = rng.random()
            if not last and out["startups"] and draw < args.early_share:
                kill_early(server, rng, pct(out["startups"], 50))
                out["kills"] += 1
                out["kills_before_ready"] += 1
                log(f"{storage} run {run}: killed during startup")
                continue
            try:
                info = one_run(server, state, args, rng, None if last else targets[run], deadline,
                               at_post=draw < args.early_share + args.post_share)
            except BaseException:
                server.kill()
                raise
            out["startups"].append(info["startup_s"])
            out["lost_but_accepted"] += info["kept"]
            out["reposted"] += info["reposted"]
            if last:
                out["final"] = final_checks(server, state, storage, args, log)
                break
            out["kills"] += 1
            out["kills_mid_post"] += int(info.get("mid_post", False))
            out["pauses_s"].append(info.get("pause_s"))
            out["indexed_at_kills"].append(info.get("indexed_at_kill"))
            log(f"{storage} run {run}: killed at {info.get('indexed_at_kill')} indexed "
                f"(target {targets[run]}, POST in flight: {info.get('mid_post')})")
    finally:
        if held is not None:
            held.stop()
    out.update(accepted=len(state["accepted"]), errors=state["errors"], wall_s=time.monotonic() - t0,
               batch_step_p50_s=pct(state["steps"], 50),
               startup_p50_s=pct(out["startups"], 50), uptime_after=uptime())
    return out


def _api_final(c, state: dict) -> dict:
    """Statuses through the API: counts by status, the indexed ids, every job."""
    counts = {s: c.get("/documents", params={"status": s, "limit": 1}).json()["total"]
              for s in ("pending", "processing", "indexed", "failed")}
    ids: list[str] = []
    while len(ids) < counts["indexed"]:
        page = c.get("/documents", params={"status": "indexed", "offset": len(ids), "limit": 500}).json()
        if not page["documents"]:
            break
        ids += [d["id"] for d in page["documents"]]
    jobs = {c.get(f"/documents/{d}").json()["job_id"] for d in sorted(state["accepted"])} | set(state["jobs"])
    views = [c.get(f"/jobs/{j}").json() for j in sorted(jobs)]
    done = sum(v["status"] == "done" and all(d["status"] == "indexed" for d in v["documents"]) for v in views
               if v.get("documents"))
    return {"counts": counts, "indexed_ids": ids, "jobs": len(views), "jobs_done": done}


def final_checks(server: ServerProcess, state: dict, storage: str, args: argparse.Namespace, log=print) -> dict:
    """The end of the last run: statuses through the API, then (server stopped) the index in-process and a
    clean build."""
    import httpx

    from hippo_engine.index.diagnostics import diff_snapshots, snapshot_index

    from .rankings import ranking_payload, rankings_hash
    with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT) as c:
        api = _api_final(c, state)
    server.stop()
    accepted = sorted(state["accepted"])
    questions = musique_questions()
    exact = {"postgres_search": "memory"} if storage == "postgres" else {}    # scores computed as SQLite's are
    rag = open_engine(server.save_dir, storage, **exact)
    try:
        held = list(rag.index_state.all_documents())
        passages = len(rag.index_state)
        served_snap = snapshot_index(rag)
        hash_served = rankings_hash(ranking_payload(rag.retrieve(questions, 20)))
    finally:
        rag.close()
    clean_dir = args.work / f"clean_{storage}"
    if clean_dir.exists():
        shutil.rmtree(clean_dir)
    log(f"{storage}: clean build of {len(accepted)} documents")
    by_id = {d["id"]: d for d in state["docs"]}
    clean = open_engine(clean_dir, "sqlite")
    try:
        clean.index([full_text(by_id[d]) for d in accepted], ids=accepted)
    finally:
        clean.close()
    clean = open_engine(clean_dir, "sqlite")     # read back, as the served index was (see the report)
    try:
        diff = diff_snapshots(served_snap, snapshot_index(clean))
        hash_clean = rankings_hash(ranking_payload(clean.retrieve(questions, 20)))
    finally:
        clean.close()
    return {"indexed_api": api["counts"]["indexed"], "failed": api["counts"]["failed"],
            "pending": api["counts"]["pending"] + api["counts"]["processing"],
            "statuses_ok": sorted(api["indexed_ids"]) == accepted and api["counts"]["indexed"] == len(accepted),
            "jobs": api["jobs"], "jobs_done": api["jobs_done"], "index_documents": len(held),
            "documents_once": sorted(held) == accepted and len(set(held)) == len(held),
            "index_passages": passages, "passages_once": passages == len(accepted), "snapshot_diff": diff,
            "hash_served": hash_served, "hash_clean": hash_clean}


def failures(r: dict, asked: int) -> list[str]:
    """Why a backend's run failed (empty: passed)."""
    f, out = r.get("final"), list(r["errors"])
    if f is None:
        return [*out, "the last run did not finish"]
    if r["accepted"] != asked:
        out.append(f"{r['accepted']} of {asked} documents accepted")
    for key in ("statuses_ok", "documents_once", "passages_once"):
        if not f[key]:
            out.append(f"{key} is false")
    if f["failed"] or f["pending"]:
        out.append(f"{f['failed']} failed, {f['pending']} pending/processing")
    if f["jobs_done"] != f["jobs"]:
        out.append(f"{f['jobs'] - f['jobs_done']} job(s) not done with every document indexed")
    if f["snapshot_diff"] or f["hash_served"] != f["hash_clean"]:
        out.append(f"not equal to a clean build: {f['snapshot_diff']}, hashes {f['hash_served']}/{f['hash_clean']}")
    return out


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the asked backends, write the report, exit 1 on any failure."""
    from .common import setup_logging
    setup_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)      # not a line per request
    args.work.mkdir(parents=True, exist_ok=True)
    results = []
    for storage in ("sqlite", "postgres"):
        if args.storage in ("both", storage):
            r = ingest_with_kills(storage, args)
            r["failures"] = failures(r, args.documents)
            results.append(r)
    command = command_line("serve-restarts", argv, args.work)
    md = render_restarts(results, command)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(md, encoding="utf-8")
    args.out.with_suffix(".json").write_text(json.dumps({"command": command, "runs": results}, indent=1),
                                             encoding="utf-8")
    print(md)
    return 1 if any(r["failures"] for r in results) else 0


if __name__ == "__main__":
    import sys

    from .common import module_main
    sys.exit(module_main(sys.modules[__name__]))
