"""The pg-sharing harness end to end, one run of each scenario (the committed figures:
reproduce/results/reliability/pg_sharing.md)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("psycopg")


@pytest.mark.slow
def test_pg_sharing_one_run_of_each_scenario(pg_dirs, tmp_path):
    from reproduce.cli import main
    base = pg_dirs()
    code = main(["pg-sharing", "--runs", "1", "--kill-runs", "1", "--docs", "4", "--work", str(base / "work"),
                 "--out-dir", str(tmp_path)])
    data = json.loads((tmp_path / "pg_sharing.json").read_text())
    assert code == 0, [r["failures"] for r in data["rows"] + data["kills"] if r["failures"]]
    assert [r["scenario"] for r in data["rows"]] == ["reader + writer", "two writers", "one closing early"]
    assert data["rows"][0]["retrievals"] > 0 and data["kills"][0]["orphan_after_kill"]
    assert "| killed starter" in (tmp_path / "pg_sharing.md").read_text()
