"""``python -m reproduce query-latency`` (reproduce/query_latency.py): its arguments, the figures from fake timings,
the profile breakdown and the report's shape on the toy corpus (no assertion on any real timing)."""
import cProfile
import itertools
import json
import pstats
import shutil

import pytest
from fakes import NgramEncoder, ScriptedLLM
from helpers import CORPUS, toy_respond
from toy_tables import QUESTIONS, make_dataset

from hippo_engine import HippoRAG
from reproduce import query_latency as ql
from reproduce.cli import build_parser


def test_arguments_and_defaults():
    args = build_parser().parse_args(["query-latency"])
    assert args.datasets == ["musique", "2wiki"] and args.variant == "ner"
    assert (args.limit, args.rounds, args.profile_queries, args.before) == (100, 3, 20, None)
    args = build_parser().parse_args(["query-latency", "--datasets", "musique", "--variant", "both", "--limit", "50",
                                      "--rounds", "2", "--copy-from", "outputs/reproduce/rankings"])
    assert args.datasets == ["musique"] and args.variant == "both" and (args.limit, args.rounds) == (50, 2)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["query-latency", "--datasets", "hotpotqa"])


def test_fake_timings_give_the_figures():
    ticks = itertools.count()
    clock = lambda: float(next(ticks))   # noqa: E731 (each call of the clock: 1 s later)
    calls = []
    out = ql.measure(lambda qs: calls.append(len(qs)), lambda qs: None, ["a", "b", "c", "d"], rounds=2, clock=clock)
    assert calls[:3] == [1, 1, 1] and calls.count(4) == 2   # warm-up, then one batch per round
    assert len(out["samples"]["single"]) == 8 and len(out["samples"]["batched"]) == 2
    assert len(out["samples"]["floor"]) == 8
    assert out["single_p50"] == out["floor_p50"] == 1000.0 and out["batched_p50"] == 250.0 and out["ratio"] == 1.0
    s = ql.summarize([10, 20, 30, 40], [5], [4, 6])
    assert (s["single_p50"], s["single_p90"], s["floor_p50"], s["ratio"]) == (25.0, 37.0, 5.0, 5.0)


def test_breakdown_reads_parts_and_callers():
    prof = cProfile.Profile()
    prof.enable()
    sorted(range(1000), key=lambda x: -x)
    prof.disable()
    b = ql.breakdown(pstats.Stats(prof), n=2)
    assert set(b["parts"]) == set(ql.PARTS) and all(v is None for v in b["parts"].values())
    assert b["counts"] == {label: 0 for label in ql.COUNTS}
    assert 1 <= len(b["top"]) <= 10 and {"function", "calls", "own_ms", "cum_ms"} <= set(b["top"][0])


def test_child_argv_and_shown_command():
    argv = ["query-latency", "--datasets", "musique", "--before", "/x/old", "--out=/x/r.md", "--work", "/w"]
    child = ql.child_argv(argv, ql.Path("/tmp/f.json"))
    assert child == ["query-latency", "--datasets", "musique", "--work", "/w", "--json-out", "/tmp/f.json"]
    shown = ql._shown_command(argv)
    assert "/x" not in shown and "/w" not in shown and shown.startswith("python -m reproduce query-latency --datasets")


@pytest.fixture()
def data_root(tmp_path):
    """A data root whose MuSiQue folder holds the toy dataset with an OpenIE file made by the toy LLM."""
    data = make_dataset(tmp_path / "data" / "musique" / "hipporag_v1_train")
    gen = HippoRAG(tmp_path / "gen", llm=ScriptedLLM(toy_respond), encoder=NgramEncoder(), show_progress=False)
    gen.index(CORPUS)
    gen.close()
    (openie,) = (tmp_path / "gen").glob("openie_results_ner_*.json")
    shutil.copy(openie, data / "openie_toyset_results.json")
    return tmp_path / "data"


def test_command_on_the_toy_index(data_root, tmp_path, capsys):
    out = tmp_path / "out" / "README.md"
    argv = ["query-latency", "--datasets", "musique", "--variant", "openie", "--rounds", "1", "--profile-queries", "3",
            "--data", str(data_root), "--work", str(tmp_path / "work"), "--out", str(out)]
    args = build_parser().parse_args(argv)
    assert ql.run(args, argv, encoder=NgramEncoder()) == 0
    assert "musique/openie: single p50" in capsys.readouterr().out
    text = out.read_text()
    assert "| musique / openie | 6 x 1 |" in text and "load average" in text and str(tmp_path) not in text
    assert "Top 10 functions" in text and "graph search" in text
    figures = json.loads((out.parent / "latency.json").read_text())
    (r,) = figures["engine"]["results"]
    assert r["questions"] == len(QUESTIONS) and len(r["samples"]["single"]) == len(QUESTIONS)
    assert r["profile"]["queries"] == 3 and r["profile"]["parts"]["graph search"] is not None
    assert {"torch_threads", "encoder_workers", "load_before", "load_after", "ratio"} <= set(r)
