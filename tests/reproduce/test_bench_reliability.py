"""The reliability benchmarks (``python -m reproduce kill-harness | two-writers | fuzz-parsers |
memory-check``) on small settings with the n-gram encoder; the full runs are in
reproduce/results/reliability/."""
import json
import random

from reproduce.bench import fuzzparsers, killharness, memcheck, twowriters
from reproduce.cli import RELIABILITY, build_parser, main


def test_every_reliability_command_has_help_and_parses():
    text = build_parser().format_help()
    for name in RELIABILITY:
        assert name in text
        assert build_parser().parse_args([name]).command == name


def test_fuzz_counts_every_parser_and_no_exception_escapes():
    res = fuzzparsers.fuzz(180, seed=3, filter_every=60, huge_every=0, call_limit=20, progress=lambda s: None)
    assert res["escaped_total"] == 0, res["findings"][:3]
    assert res["wrong_type_total"] == 0 and res["over_limit_total"] == 0
    calls = {k: v["calls"] for k, v in res["parsers"].items()}
    assert calls["RecognitionFilter.filter"] == 3 and all(v == 180 for k, v in calls.items() if "Filter" not in k)
    assert set(res["generators"]) == set(fuzzparsers.GENERATORS)
    assert res["parsers"]["read_ner"]["documented_ValueError"] > 0      # bad replies were generated
    assert "| parse_report |" in fuzzparsers.render(res, "cmd")


def test_fuzz_reports_an_escaping_exception(monkeypatch):
    def leaky(text):
        if "[" in text:
            raise KeyError("leak")
        return []

    monkeypatch.setattr(fuzzparsers, "parsers", lambda every: [("leaky", leaky, (ValueError,), list, 1)])
    res = fuzzparsers.fuzz(200, seed=1, filter_every=1, huge_every=0, call_limit=5, progress=lambda s: None)
    assert res["escaped_total"] > 0 and res["parsers"]["leaky"]["escaped_KeyError"] == res["escaped_total"]
    assert res["findings"][0]["what"].startswith("KeyError")


def test_generators_make_deep_surrogate_and_huge_replies():
    rng = random.Random(0)
    deep = [fuzzparsers._deep(rng) for _ in range(50)]
    assert max(t.count("[") + t.count("{") for t in deep) > 1000
    assert any(0xD800 <= ord(c) <= 0xDFFF for _ in range(50) for c in fuzzparsers._bytes(rng))
    assert len(fuzzparsers._huge(rng)) >= 200_000


def test_journal_reading_after_a_kill(tmp_path):
    j = tmp_path / "journal.jsonl"
    lines = [{"id": "0-0", "op": "index", "docs": [1, 2]}, {"id": "0-0", "done": 1},
             {"id": "0-1", "op": "delete", "docs": [2]}, {"id": "0-1", "done": 1},
             {"id": "0-2", "op": "index", "docs": [5]}]
    j.write_text("\n".join(json.dumps(x) for x in lines) + '\n{"id": "0-2", "do')     # the kill cut the last line
    present, pending, errors = killharness.read_journal(j)
    assert present == {1} and pending["docs"] == [5] and errors == []


def test_interleaving_and_slope():
    assert twowriters.interleaving([[0, 1, 5], [2, 3, 5]], [[1, 2, 5], [4, 5, 5]]) == 3
    assert twowriters.interleaving([[0, 1, 5], [1, 2, 5]], [[3, 4, 5]]) == 1
    assert memcheck.slope_per_1000([(0, 10.0), (1000, 11.0), (2000, 12.0)]) == 1.0


def test_two_writers_and_memory_check_end_to_end(musique_dir, tmp_path):
    out = tmp_path / "out"
    rc = main(["two-writers", "--passages", "16", "--trials", "2", "--batch", "4", "--encoder", "fake",
               "--work", str(tmp_path / "tw"), "--out-dir", str(out)])
    for trial in json.loads((out / "two_writers.json").read_text())["trials"]:
        assert trial["exit"] == {"a": 0, "b": 0, "reader": 0} and trial["diff"] == [], trial
        assert trial["reader"]["final_passages"] == 16 and trial["reader"]["final_returned"] == 16, trial
        assert trial["reader"]["errors"] == [], trial["reader"]["errors"][:1]   # the stale-graph race (1d2611a)
    assert rc == 0
    assert main(["memory-check", "--passages", "16", "--calls", "40", "--warmup", "10", "--checkpoints", "3",
                 "--encoder", "fake", "--work", str(tmp_path / "mc"), "--out-dir", str(out)]) == 0
    mc = json.loads((out / "memory_check.json").read_text())
    assert mc["calls_with_errors"] == 0 and len(mc["points"]) >= 3 and mc["rss_end_mb"] > 0
    assert "slope per 1,000 calls" in (out / "memory_check.md").read_text()


def test_reports_with_lone_surrogates_are_written(tmp_path):
    from reproduce.bench.reliability import write_reports
    md, js = write_reports("x", "# x\n", {"input": "\ud800 and \udfff"}, out_dir=tmp_path)
    assert json.loads(js.read_text())["input"] == "\ud800 and \udfff"
