"""``python -m reproduce pg-sharing --storage falkordb``: two processes on one embedded FalkorDB
server, one run of each scenario (the committed figures:
reproduce/results/reliability/falkordb_sharing.md; PostgreSQL's run is tested in tests/store/postgres)."""
from __future__ import annotations

import json

import pytest
from helpers import require_falkordb

from reproduce.bench import pg_sharing
from reproduce.cli import build_parser, main


def test_the_backend_is_chosen_and_names_the_report():
    parse = build_parser().parse_args
    pg, fk = parse(["pg-sharing"]), parse(["pg-sharing", "--storage", "falkordb"])
    assert (pg.storage, pg_sharing.report_name(pg)) == ("postgres", "pg_sharing")
    assert (fk.storage, pg_sharing.report_name(fk)) == ("falkordb", "falkordb_sharing")
    assert pg_sharing.report_name(parse(["pg-sharing", "--storage", "falkordb", "--name", "mine"])) == "mine"
    with pytest.raises(SystemExit):
        parse(["pg-sharing", "--storage", "sqlite"])          # no server to share


@pytest.mark.integration
def test_falkordb_sharing_one_run_of_each_scenario(tmp_path):
    require_falkordb()
    code = main(["pg-sharing", "--storage", "falkordb", "--runs", "1", "--kill-runs", "1", "--docs", "4",
                 "--work", str(tmp_path / "work"), "--out-dir", str(tmp_path)])
    data = json.loads((tmp_path / "falkordb_sharing.json").read_text())
    assert code == 0, [r["failures"] for r in data["rows"] + data["kills"] if r["failures"]]
    assert data["storage"] == "falkordb"
    assert [r["scenario"] for r in data["rows"]] == ["reader + writer", "two writers", "one closing early"]
    # the reader retrieved while the writer wrote; the killed starter's server outlived it
    assert data["rows"][0]["retrievals"] > 0 and data["kills"][0]["orphan_after_kill"]
    text = (tmp_path / "falkordb_sharing.md").read_text()
    assert text.startswith("# FalkorDB in many hands") and "| killed starter" in text


@pytest.mark.integration
def test_a_run_past_the_hang_deadline_ends_the_benchmark_and_leaves_no_server(tmp_path):
    require_falkordb()
    from reproduce.bench import servers
    code = main(["pg-sharing", "--storage", "falkordb", "--runs", "2", "--kill-runs", "1", "--docs", "4",
                 "--hang-timeout", "0.5", "--work", str(tmp_path / "work"), "--out-dir", str(tmp_path)])
    data = json.loads((tmp_path / "falkordb_sharing.json").read_text())
    assert code == 1 and data["kills"] == []
    assert data["rows"][-1]["scenario"] == "hung" and "no answer within 0.5 s" in data["rows"][-1]["failures"][0]
    folder = servers.data_dir("falkordb", tmp_path / "work" / "index")
    assert servers.server_pids(folder) == [] and not servers.embedded("falkordb", folder).running()
