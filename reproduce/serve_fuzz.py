"""``python -m reproduce serve-fuzz``: API fuzzing of ``hippo-engine serve`` with schemathesis.

Serves the bundled sample corpus (indexed with ``extractor="ner"`` and the real embedder; reader: a
scripted OpenAI-compatible server on 127.0.0.1) by real uvicorn on 127.0.0.1 with an access key,
loads the OpenAPI schema from ``/openapi.json`` and sends, for every operation of the schema (every
route, at ``/`` and under ``/w/{workspace}/``), ``--positive`` requests generated from the schema
and ``--negative`` requests that break it (schemathesis's generation modes; an operation with
nothing to break gets none). Each response is checked by schemathesis: not a server error (5xx),
a documented status code, a documented content type and headers, a body that conforms to the
schema of its status (server-sent events: each event), and a rejected negative request.

Writes ``reproduce/results/serve/fuzz.json`` (per operation: requests, status codes, failures) and
``fuzz.md``; exits 1 if any request got a server error or a response broke its schema.

Example:
    python -m reproduce serve-fuzz --positive 30 --negative 20
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results" / "serve"
KEY = "fuzz-access-key"
#: failures that mean the server broke its own contract (the acceptance figures); the rest are reported
CONTRACT = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
            "response_headers_conformance", "response_schema_conformance")
STRICTNESS = ("negative_data_rejection",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--positive", type=int, default=30, help="schema-conforming requests per operation (default 30)")
    p.add_argument("--negative", type=int, default=20, help="schema-breaking requests per operation (default 20)")
    p.add_argument("--seed", type=int, default=23, help="hypothesis seed (default 23)")
    p.add_argument("--work", default=None, help="folder for the index (default: a temporary one)")
    p.add_argument("--out", default=str(OUT), help=f"where fuzz.json and fuzz.md go (default {OUT})")


def _checks() -> dict[str, Callable]:
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi import checks as oc
    named = {"not_a_server_error": not_a_server_error}
    for name in CONTRACT[1:] + STRICTNESS:
        named[name] = getattr(oc, name)
    return named


def _failure_names(group: BaseException, checks: dict[str, Callable]) -> list[str]:
    """The check names of a schemathesis failure group (each failure class lists its checks)."""
    names = []
    for f in getattr(group, "exceptions", (group,)):
        own = [c for c in getattr(f, "checks", ()) if c in checks]
        names.append(own[0] if own else type(f).__name__)
    return names


def fuzz(base_url: str, *, headers: dict[str, str] | None = None, positive: int = 30, negative: int = 20,
         seed: int = 23, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Fuzz every operation of ``base_url``'s ``/openapi.json``; returns the report (see :func:`summary`)."""
    import requests
    import schemathesis
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json", headers=headers or {})
    checks = _checks()
    session = requests.Session()
    ops: dict[str, dict[str, Any]] = {}
    for result in schema.get_all_operations():
        op = result.ok()
        row = ops.setdefault(op.label, {"requests": 0, "statuses": Counter(), "failures": []})
        for mode, count in ((GenerationMode.POSITIVE, positive), (GenerationMode.NEGATIVE, negative)):
            if count > 0:
                _fuzz_one(op.as_strategy(generation_mode=mode), mode.value, count, seed, row,
                          lambda case, row=row, mode=mode: _send(case, mode.value, row, base_url, headers, session,
                                                                 checks))
        log(f"{op.label}: {row['requests']} requests, statuses {dict(row['statuses'])}, "
            f"{len(row['failures'])} failures")
    session.close()
    return summary(ops)


def _fuzz_one(strategy: Any, mode: str, count: int, seed: int, row: dict, send: Callable[[Any], None]) -> None:
    """Draw ``count`` cases from ``strategy`` (hypothesis, seeded, no shrinking) and ``send`` each."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis.errors import Unsatisfiable

    @hseed(seed)
    @settings(max_examples=count, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(case):
        send(case)
    try:
        one()
    except Unsatisfiable:        # nothing in the operation can be made invalid (no parameters)
        pass


def _send(case: Any, mode: str, row: dict, base_url: str, headers: dict | None, session: Any,
          checks: dict[str, Callable]) -> None:
    """Send one case and record its status and any failed check."""
    import requests
    from schemathesis.core.failures import FailureGroup
    from schemathesis.core.parameters import ParameterLocation
    row["requests"] += 1
    if case.meta is not None and case.meta.is_negative_at(ParameterLocation.HEADER):
        headers = None      # the case breaks its headers (e.g. leaves the access key out): send them as they are
    try:
        response = case.call(base_url=base_url, headers=headers, session=session, timeout=120)
    except requests.RequestException as e:
        row["failures"].append({"mode": mode, "checks": ["transport"], "status": None, "message": str(e)[:500]})
        return
    row["statuses"][str(response.status_code)] += 1
    try:
        case.validate_response(response, checks=list(checks.values()), headers=headers)
    except (Exception, FailureGroup) as e:    # noqa: BLE001 - a FailureGroup (or one Failure)
        row["failures"].append({"mode": mode, "checks": _failure_names(e, checks), "status": response.status_code,
                                "message": str(e)[:1500], "curl": case.as_curl_command(headers=headers)[:1500]})


def summary(ops: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Totals: requests, server errors (5xx), contract failures by check, strictness failures."""
    statuses: Counter = Counter()
    by_check: Counter = Counter()
    for row in ops.values():
        statuses.update(row["statuses"])
        for f in row["failures"]:
            by_check.update(set(f["checks"]))
    server_errors = sum(n for s, n in statuses.items() if s.startswith("5"))
    contract = sum(1 for row in ops.values() for f in row["failures"] if set(f["checks"]) & set(CONTRACT[1:]))
    return {"operations": len(ops), "requests": sum(r["requests"] for r in ops.values()),
            "statuses": dict(sorted(statuses.items())), "server_errors": server_errors,
            "schema_failures": contract, "failures_by_check": dict(by_check),
            "per_operation": {k: {**v, "statuses": dict(v["statuses"])} for k, v in ops.items()}}


def markdown(report: dict[str, Any], meta: dict[str, Any]) -> str:
    """The report as a short markdown page."""
    lines = ["# hippo-engine serve: API fuzzing with schemathesis", "",
             f"{meta['when']}; schemathesis {meta['schemathesis']}; {meta['positive']} positive + "
             f"{meta['negative']} negative examples per operation (seed {meta['seed']}); {meta['seconds']:.0f} s; "
             f"load before: {meta['load']}", "",
             f"- operations: {report['operations']} (every route of /openapi.json, both prefixes)",
             f"- requests: {report['requests']}",
             f"- server errors (5xx): {report['server_errors']}",
             f"- responses breaking their schema (status, content type, headers, body): {report['schema_failures']}",
             f"- failures by check: {report['failures_by_check'] or 'none'}",
             f"- status codes: {report['statuses']}", "",
             "| operation | requests | statuses | failures |", "|---|---:|---|---:|"]
    for label, row in report["per_operation"].items():
        lines.append(f"| `{label}` | {row['requests']} | {row['statuses']} | {len(row['failures'])} |")
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Index the sample, serve it, fuzz it, write the report."""
    import os

    import schemathesis

    from .serve_common import sample_service
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="serve-fuzz-") as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        t = time.monotonic()
        with sample_service(work / "index", access_key=KEY) as (url, _memory):
            report = fuzz(url, headers={"X-API-Key": KEY}, positive=args.positive, negative=args.negative,
                          seed=args.seed)
        meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "schemathesis": schemathesis.__version__,
                "positive": args.positive, "negative": args.negative, "seed": args.seed,
                "seconds": time.monotonic() - t, "load": load}
    (out / "fuzz.json").write_text(json.dumps({"meta": meta, **report}, indent=1, ensure_ascii=False))
    (out / "fuzz.md").write_text(markdown(report, meta))
    print(markdown(report, meta))
    return 1 if report["server_errors"] or report["schema_failures"] else 0
