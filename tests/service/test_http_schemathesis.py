"""A small schemathesis run in the suite (the full one: ``python -m reproduce serve-fuzz``, on the real
memory): every operation of the OpenAPI schema, schema-conforming and schema-breaking requests, through
real uvicorn on 127.0.0.1, over the fake memory. No server error, no response that breaks its schema;
and the harness does catch both when the app misbehaves."""
import pytest
from http_fakes import FakeWorkspaces

pytest.importorskip("schemathesis")

from hippo_engine.service.app import create_app  # noqa: E402
from hippo_engine.service.errors import ApiError  # noqa: E402
from hippo_engine.service.settings import ServiceSettings  # noqa: E402
from reproduce.serve_common import live_server  # noqa: E402
from reproduce.serve_fuzz import fuzz  # noqa: E402

KEY = "suite-key"


def _app(ws=None, **settings):
    ws = ws or FakeWorkspaces()
    ws.get(None, create=True).add([{"id": "d1", "text": "Paris is the capital of France."},
                                   {"id": "d2", "text": "Berlin is the capital of Germany."}])
    return create_app(ServiceSettings(save_dir="unused", **settings), workspaces=ws)


def test_every_operation_fuzzed_without_server_errors_or_schema_breaks():
    with live_server(_app(access_key=KEY, mount_web=True, mount_mcp=True)) as url:
        report = fuzz(url, headers={"X-API-Key": KEY}, positive=6, negative=4, seed=1, log=lambda s: None)
    assert report["operations"] >= 30
    assert all(row["requests"] >= 1 for row in report["per_operation"].values())
    assert report["requests"] >= 200
    assert report["server_errors"] == 0, report["failures_by_check"]
    assert report["schema_failures"] == 0, [f for r in report["per_operation"].values() for f in r["failures"]][:3]
    assert {"200", "202", "401", "404", "422"} <= set(report["statuses"])


def test_the_harness_reports_server_errors_and_undocumented_statuses():
    ws = FakeWorkspaces()
    ws.memories[None].raise_on["stats"] = ApiError(409, "an undocumented status")
    ws.memories[None].raise_on["retrieve"] = RuntimeError("a bug")
    with live_server(_app(ws, mount_web=False, mount_mcp=False), log_level="critical") as url:
        report = fuzz(url, positive=3, negative=0, seed=1, log=lambda s: None)
    assert report["server_errors"] >= 1 and report["failures_by_check"]["not_a_server_error"] >= 1
    stats = report["per_operation"]["GET /stats"]["failures"]
    assert stats and "status_code_conformance" in stats[0]["checks"] and report["schema_failures"] >= 2
