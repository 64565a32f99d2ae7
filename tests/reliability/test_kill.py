"""kill -9 at random moments of index() and delete(): a few kills of the benchmark's harness
(``python -m reproduce kill-harness``; the benchmark runs hundreds with the real embedder)."""
import json

from reproduce.cli import main


def test_a_writer_killed_at_random_moments_leaves_a_readable_index_that_resumes_to_a_clean_build(
        musique_dir, tmp_path):
    out = tmp_path / "report"
    rc = main(["kill-harness", "--kills", "3", "--passages", "24", "--max-batch", "6", "--max-delay", "0.6",
               "--encoder", "fake", "--seed", "7", "--work", str(tmp_path / "work"), "--out-dir", str(out)])
    summary = json.loads((out / "kill_harness.json").read_text())
    c = summary["counts"]
    assert c["kills"] + c.get("exited_before_kill", 0) == 3, c
    assert c.get("unreadable", 0) == 0, [r.get("error") for r in summary["rows"]]
    assert c.get("lost_docs", 0) == 0 and c.get("extra_docs", 0) == 0, c
    assert c.get("atomic_partial", 0) == 0 and c.get("child_errors", 0) == 0, summary["rows"]
    assert c["compared"] == 3 and c.get("not_equal_clean", 0) == 0, [r.get("diff") for r in summary["rows"]]
    assert c.get("orphan_tmp_left_at_end", 0) == 0, summary["orphan_files_seen"]
    assert rc == 0
    assert (out / "kill_harness.md").read_text().startswith("# kill -9 harness")
