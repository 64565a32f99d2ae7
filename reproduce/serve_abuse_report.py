"""``serve-abuse``'s figures (one summary per phase), its targets (each computed from the figures, never
assumed) and its markdown report (:mod:`reproduce.serve_abuse`)."""
from __future__ import annotations

import argparse
import math
from collections import Counter

from .serve_abuse_phases import PROBE_TIMEOUT, Probe, Watched, socket_summary, within
from .serve_harness import pct


def latencies(probes: list[Probe], timeout: float) -> list[float]:
    """Each probe's seconds; one without a 200 counts as ``timeout`` (at least)."""
    return [p.seconds if p.status == 200 else max(p.seconds, timeout) for p in probes]


def probe_stats(probes: list[Probe], timeout: float) -> dict:
    """Counts and percentiles (ms) of a list of probes (failures counted as ``timeout``)."""
    xs = latencies(probes, timeout)
    statuses = Counter(str(p.status) if p.status is not None else "no answer" for p in probes)
    errors = sorted({p.error for p in probes if p.error})[:5]
    return {"probes": len(probes), "ok": sum(p.status == 200 for p in probes), "statuses": dict(statuses),
            "p50_ms": 1000 * pct(xs, 50), "p95_ms": 1000 * pct(xs, 95), "p99_ms": 1000 * pct(xs, 99),
            "max_ms": 1000 * max(xs, default=float("nan")), "errors": errors}


def buckets(probes: list[Probe], start: float, width: float, timeout: float) -> list[dict]:
    """The probes' worst latency per ``width`` seconds from ``start`` (how the load went, over time)."""
    out: dict[int, list[float]] = {}
    for p, x in zip(probes, latencies(probes, timeout), strict=True):
        out.setdefault(int((p.t - start) // width), []).append(x)
    return [{"from_s": k * width, "probes": len(v), "max_ms": round(1000 * max(v), 1)} for k, v in sorted(out.items())]


def summarize_answers(args: argparse.Namespace, idle: list[Probe], probes: dict[str, list[Probe]],
                      answers: list[dict], running: dict, window: tuple[float, float, float]) -> dict:
    """Phase 1's figures."""
    t0, t_sent, t_end = window
    health = within(probes["health"], t0, t_end)
    busy = within(probes["retrieve"], t0, t_end)
    return {
        "answers_sent": len(answers), "answer_statuses": dict(Counter(str(a["status"]) for a in answers)),
        "abandoned": sum(a["abandoned"] for a in answers),
        "abandoned_streams": sum(a["abandoned"] and a["stream"] for a in answers),
        "answer_errors": sorted({a["error"] for a in answers if a["error"]})[:5],
        "send_seconds": round(t_sent - t0, 1), "window_seconds": round(t_end - t0, 1),
        "health": probe_stats(health, PROBE_TIMEOUT), "health_max_per_5s": buckets(health, t0, 5.0, PROBE_TIMEOUT),
        "retrieve_idle": probe_stats(idle, 30.0), "retrieve_busy": probe_stats(busy, 30.0),
        "llm": running, "llm_delay_s": args.llm_delay, "leave_after_s": args.leave_after}


def summarize_sockets(args: argparse.Namespace, socks: list[Watched], probes: list[Probe],
                      window: tuple[float, float], log_text: str) -> dict:
    """Phase 2's figures."""
    t0, t1 = window
    during = within(probes, t0, t1)
    answered = [p for p in during if p.status is not None]
    return {"idle": socket_summary(socks, "idle"), "slow": socket_summary(socks, "slow"),
            "health": probe_stats(during, PROBE_TIMEOUT) | {"answered": len(answered)},
            "health_answered_p99_ms": 1000 * pct([p.seconds for p in answered], 99),
            "health_max_per_5s": buckets(during, t0, 5.0, PROBE_TIMEOUT),
            "health_after": probe_stats([p for p in probes if p.t > t1], PROBE_TIMEOUT),
            "log_bytes": len(log_text.encode("utf-8")), "log_emfile_lines": log_text.count("Too many open files"),
            "fd_limit": args.socket_fd_limit, "held_seconds": args.slow_seconds}


def slope(samples: list[dict], key: str, by: str = "created") -> float:
    """Least-squares growth of ``key`` per workspace created (``by``) over the samples taken once half of
    them were created (NaN: too few). Counting created workspaces, not attempts, a server that stops
    creating them does not pass for bounded."""
    pts = [(s[by], s[key]) for s in samples if key in s]
    if not pts:
        return float("nan")
    half = [p for p in pts if p[0] >= max(x for x, _ in pts) / 2]
    if len(half) < 2:
        return float("nan")
    mx, my = sum(x for x, _ in half) / len(half), sum(y for _, y in half) / len(half)
    sxx = sum((x - mx) ** 2 for x, _ in half)
    return sum((x - mx) * (y - my) for x, y in half) / sxx if sxx else float("nan")


def summarize_workspaces(args: argparse.Namespace, made: dict, states: dict[str, dict[str, str]],
                         final: dict) -> dict:
    """Phase 3's figures."""
    rows, samples = made["rows"], made["samples"]
    ws_rows = [r for r in rows if r["workspace"] != "default"]
    statuses = Counter(str(r["status"]) if r["status"] is not None else "no answer" for r in rows)
    default = states.get("default", {})
    others = {k: v for k, v in states.items() if k != "default"}
    marks = {s["workspaces"]: s for s in samples if "rss_mb" in s}
    at = {k: marks[k] for k in sorted({0, 16, len(ws_rows) // 2, len(ws_rows)}) if k in marks}
    return {
        "asked": args.workspaces, "attempted": len(ws_rows), "stopped": made["stopped"],
        "seconds_per_workspace_p50": pct([r["seconds"] for r in ws_rows], 50),
        "created": sum(r["status"] == 202 for r in ws_rows),
        "statuses": dict(statuses), "server_errors": sum(r["status"] is not None and r["status"] >= 500 for r in rows),
        "unanswered": statuses.get("no answer", 0),
        "errors": sorted({f"{r['status']}: {r['error']}" for r in rows if r["error"]})[:6],
        "jobs": dict(Counter(str(r["job"]) for r in ws_rows)),
        "default_documents": {"posted": len(made["default_ids"]), "statuses": dict(Counter(default.values()))},
        "rechecked_workspaces": len(others),
        "rechecked_statuses": dict(Counter(s for v in others.values() for s in v.values())),
        "failed_elsewhere": sum(s == "failed" for v in states.values() for s in v.values()),
        "listing_errors": sorted({f"{k}: {v['<request>']}" for k, v in states.items() if "<request>" in v})[:5],
        "rss_mb_per_workspace_second_half": slope(samples, "rss_mb"),
        "fds_per_workspace_second_half": slope(samples, "fds"),
        "threads_per_workspace_second_half": slope(samples, "threads"),
        "at": {str(k): {f: round(v[f], 1) for f in ("rss_mb", "threads", "fds")} for k, v in at.items()},
        "peak": {f: max((s[f] for s in samples if f in s), default=None) for f in ("rss_mb", "threads", "fds")},
        "final": {f: final.get(f) for f in ("rss_mb", "threads", "fds")},
        "fd_limit": args.workspace_fd_limit, "samples": samples}


def _target(phase: str, text: str, measured: str, passed: bool) -> dict:
    return {"phase": phase, "target": text, "measured": measured, "passed": bool(passed)}


def targets(args: argparse.Namespace, phases: dict) -> list[dict]:
    """Each acceptance target of the phases run, with the figure it was judged on."""
    out = [_target(name, "the phase ran", ph["error"].splitlines()[0][:300], False)
           for name, ph in phases.items() if "error" in ph]
    phases = {name: ph for name, ph in phases.items() if "error" not in ph}
    if (a := phases.get("answers")) is not None:
        h, idle, busy = a["health"], a["retrieve_idle"]["p95_ms"], a["retrieve_busy"]["p95_ms"]
        out.append(_target("answers", f"/health p99 < {args.health_p99_ms:g} ms throughout",
                           f"{h['p99_ms']:.1f} ms ({h['probes'] - h['ok']} of {h['probes']} probes without a 200)",
                           h["probes"] > 0 and h["p99_ms"] < args.health_p99_ms))
        out.append(_target("answers", f"/retrieve p95 <= {args.retrieve_ratio:g}x idle",
                           f"{busy:.1f} ms vs idle {idle:.1f} ms ({busy / idle:.2f}x)",
                           a["retrieve_busy"]["probes"] > 0 and busy <= args.retrieve_ratio * idle))
        llm = a["llm"]
        out.append(_target("answers", f"no LLM call running {args.grace:g} s after its client left",
                           f"{llm['left_running']} of {llm['llm_calls_tagged']} calls "
                           f"({llm['in_flight_when_client_left']} in flight when their client left)",
                           llm["left_running"] == 0))
    if (s := phases.get("sockets")) is not None:
        h = s["health"]
        out.append(_target("sockets", "/health answers throughout (an HTTP status within 5 s)",
                           f"{h['answered']} of {h['probes']} answered ({h['ok']} x 200)",
                           h["probes"] > 0 and h["answered"] == h["probes"]))
        out.append(_target("sockets", f"server log < {args.log_limit_mb:g} MB",
                           f"{s['log_bytes'] / 1e6:.3f} MB ({s['log_emfile_lines']} 'Too many open files' lines)",
                           s["log_bytes"] < args.log_limit_mb * 1e6))
    if (w := phases.get("workspaces")) is not None:
        stopped = f" (stopped: {w['stopped']})" if w.get("stopped") else ""
        out.append(_target("workspaces", "no 5xx (and every request answered)",
                           f"{w['server_errors']} x 5xx, {w['unanswered']} unanswered; {w['created']} of "
                           f"{w['asked']} created{stopped}", w["server_errors"] == 0 and w["unanswered"] == 0
                           and w["attempted"] == w["asked"]))
        out.append(_target("workspaces", "no document of another workspace failed",
                           f"{w['failed_elsewhere']} failed (default + {w['rechecked_workspaces']} rechecked)",
                           w["failed_elsewhere"] == 0 and not w["listing_errors"]))
        rate = w["rss_mb_per_workspace_second_half"]
        out.append(_target("workspaces", f"RSS bounded: < {args.rss_slope_mb:g} MB per workspace created, "
                           "over the second half", f"{rate:.2f} MB per workspace (peak {w['peak']['rss_mb']} MB)",
                           not math.isnan(rate) and rate < args.rss_slope_mb))
    return out


def _fmt(x) -> str:
    return f"{x:.1f}" if isinstance(x, float) else str(x)


def render(result: dict) -> str:
    """The markdown report."""
    lines = ["# serve-abuse: hippo-engine serve in hostile hands (issue 37)", "",
             f"Command: `{result['command']}`  ", f"Server: hippo_engine at {result['engine']}  ",
             f"Load before / after: `{result['uptime_before']}` / `{result['uptime_after']}`", "",
             "| phase | target | measured | passed |", "|---|---|---|---|"]
    lines += [f"| {t['phase']} | {t['target']} | {t['measured']} | {'yes' if t['passed'] else 'NO'} |"
              for t in result["targets"]]
    for name, ph in result["phases"].items():
        lines += ["", f"## {name} ({ph['seconds']:g} s)", ""]
        lines += [f"- {k}: {_fmt(v)}" for k, v in ph.items()
                  if k not in ("samples", "seconds", "error") and not isinstance(v, dict | list)]
        if "error" in ph:
            lines += ["```", ph["error"], "```"]
        for k, v in ph.items():
            if isinstance(v, dict):
                lines.append(f"- {k}: " + ", ".join(f"{kk}={_fmt(vv)}" for kk, vv in v.items()
                                                    if not isinstance(vv, list) or len(vv) <= 12))
            elif isinstance(v, list) and k != "samples" and v:
                lines.append(f"- {k}: {v[:24]}{' ...' if len(v) > 24 else ''}")
    return "\n".join(lines) + "\n"
