"""``serve-restarts`` (reproduce/serve_restarts.py), small: ``hippo-engine serve`` killed with SIGKILL twice
while it ingests 30 MuSiQue passages posted through the API, restarted each time; every accepted document ends
indexed exactly once, the statuses say so and the index equals a clean build; once on PostgreSQL (an embedded
server in the index folder, held by the harness) with one kill over 16 passages."""
from __future__ import annotations

import argparse
import json

import pytest
from helpers import require_postgres
from store import conftest as pg_fixtures

from reproduce import serve_restarts

pg_dirs = pg_fixtures.pg_dirs      # folders the embedded server's user can reach, cleaned up after the test


@pytest.mark.slow
def test_two_kills_over_thirty_documents(tmp_path, musique_dir):
    ap = argparse.ArgumentParser()
    serve_restarts.add_arguments(ap)
    args = ap.parse_args(["--documents", "30", "--kills", "2", "--batch", "5", "--index-batch", "4",
                          "--queue", "10", "--early-share", "0", "--time-limit", "900",
                          "--work", str(tmp_path / "work"), "--out", str(tmp_path / "restarts.md")])
    assert serve_restarts.run(args, ["--documents", "30", "--kills", "2"]) == 0
    run = json.loads((tmp_path / "restarts.json").read_text())["runs"][0]
    assert run["kills"] == 2 and run["accepted"] == 30 and run["failures"] == []
    final = run["final"]
    assert final["indexed_api"] == 30 and final["index_documents"] == 30 and final["index_passages"] == 30
    assert final["snapshot_diff"] == [] and final["hash_served"] == final["hash_clean"]
    assert all(0 < n < 30 for n in run["indexed_at_kills"])
    assert str(tmp_path) not in (tmp_path / "restarts.md").read_text()


@pytest.mark.slow
def test_one_kill_over_sixteen_documents_on_postgresql(pg_dirs, musique_dir):
    require_postgres()
    work = pg_dirs()
    ap = argparse.ArgumentParser()
    serve_restarts.add_arguments(ap)
    args = ap.parse_args(["--storage", "postgres", "--documents", "16", "--kills", "1", "--batch", "4",
                          "--index-batch", "4", "--queue", "8", "--early-share", "0", "--time-limit", "900",
                          "--work", str(work), "--out", str(work / "restarts.md")])
    assert serve_restarts.run(args, ["--storage", "postgres"]) == 0
    run = json.loads((work / "restarts.json").read_text())["runs"][0]
    assert run["storage"] == "postgres" and run["kills"] == 1 and run["failures"] == []
    assert run["final"]["index_documents"] == 16 and run["final"]["snapshot_diff"] == []
