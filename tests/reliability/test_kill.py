"""kill -9 at random moments of index() and delete(): a few kills of the benchmark's harness
(``python -m reproduce kill-harness``; the benchmark runs hundreds with the real embedder), on
SQLite and on an embedded FalkorDB server (stopped after the last kill)."""
import json

import pytest
from helpers import require_falkordb

from reproduce.bench import killharness, servers
from reproduce.cli import main


def _kills(tmp_path, storage: str, kills: int, passages: int) -> tuple[int, dict]:
    out = tmp_path / "report"
    rc = main(["kill-harness", "--kills", str(kills), "--passages", str(passages), "--max-batch", "6",
               "--max-delay", "0.6", "--encoder", "fake", "--seed", "7", "--storage", storage,
               "--work", str(tmp_path / "work"), "--out-dir", str(out)])
    assert (out / "kill_harness.md").read_text().startswith("# kill -9 harness")
    return rc, json.loads((out / "kill_harness.json").read_text())


def _assert_clean(rc: int, summary: dict, kills: int) -> None:
    c = summary["counts"]
    assert c["kills"] + c.get("exited_before_kill", 0) == kills, c
    assert c.get("unreadable", 0) == 0, [r.get("error") for r in summary["rows"]]
    assert c.get("lost_docs", 0) == 0 and c.get("extra_docs", 0) == 0, c
    assert c.get("atomic_partial", 0) == 0 and c.get("child_errors", 0) == 0, summary["rows"]
    assert c["compared"] == kills and c.get("not_equal_clean", 0) == 0, [r.get("diff") for r in summary["rows"]]
    assert c.get("orphan_tmp_left_at_end", 0) == 0, summary["orphan_files_seen"]
    assert rc == 0


def test_a_writer_killed_at_random_moments_leaves_a_readable_index_that_resumes_to_a_clean_build(
        musique_dir, tmp_path):
    rc, summary = _kills(tmp_path, "sqlite", 3, 24)
    _assert_clean(rc, summary, 3)
    assert "server_left_at_end" not in summary["counts"]


@pytest.mark.integration
def test_on_falkordb_the_killed_writers_server_is_stopped_after_the_last_kill(musique_dir, tmp_path):
    require_falkordb()
    rc, summary = _kills(tmp_path, "falkordb", 2, 12)
    _assert_clean(rc, summary, 2)
    assert summary["storage"] == "falkordb" and summary["counts"]["server_left_at_end"] == 0
    data = servers.data_dir("falkordb", tmp_path / "work" / "index")
    assert data.is_dir() and servers.server_pids(data) == []
    assert not servers.embedded("falkordb", data).running()


def test_temporary_files_of_the_embedded_servers_folders_are_not_orphans(tmp_path):
    for name in ("postgres", "falkordb"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "sub" / "temp.tmp").write_text("server's own")
    (tmp_path / "graph.npz.tmp").write_text("cut write")
    assert killharness.orphans(tmp_path) == ["graph.npz.tmp"]
    assert servers.data_dir("sqlite", tmp_path) is None and not servers.stop_server("sqlite", tmp_path)
    assert servers.data_dir("falkordb", tmp_path) == tmp_path / "falkordb"
    with pytest.raises(ValueError, match="no embedded server"):
        servers.embedded("sqlite", tmp_path)


def test_a_kill_past_the_hang_deadline_is_a_finding_that_ends_the_run(musique_dir, tmp_path):
    out = tmp_path / "report"
    rc = main(["kill-harness", "--kills", "3", "--passages", "12", "--encoder", "fake", "--hang-timeout", "0.3",
               "--work", str(tmp_path / "work"), "--out-dir", str(out)])
    summary = json.loads((out / "kill_harness.json").read_text())
    assert rc == 1 and summary["counts"]["hung"] == 1 and summary["counts"]["unreadable"] == 1
    assert len(summary["rows"]) == 1 and "no answer within 0.3 s" in summary["rows"][0]["error"]
    assert "| hung | 1 |" in (out / "kill_harness.md").read_text()


def test_a_hung_server_that_ignores_its_shutdown_is_killed(tmp_path):
    import subprocess
    import sys
    data = tmp_path / "falkordb"
    data.mkdir()
    # a process working in the server's folder that no SHUTDOWN reaches and that ignores SIGTERM
    proc = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                             "signal.SIG_IGN); print(1, flush=True); time.sleep(120)"], cwd=data,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "1"
        assert servers.server_pids(data) == [proc.pid]
        assert servers.kill_server(data) and proc.wait(timeout=10) == -9
        assert servers.server_pids(data) == [] and not servers.kill_server(data)
    finally:
        proc.kill()
