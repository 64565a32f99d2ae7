"""``hippo-engine retrieve -v``: the retrieval's wall time on stderr (the engine's load apart), stdout the
same as without ``-v``: on an index of fake models (fast), and with the real embedder and spaCy on the
bundled sample corpus (slow)."""
import json
import re
from importlib import resources

import pytest
from fakes import ScriptedLLM
from helpers import CORPUS, cli_index, make_rag, toy_respond

import hippo_engine.cli.common as cli
from hippo_engine.cli import main
from hippo_engine.cli.query import timing_line

LINE = re.compile(r"^retrieved (\d+) quer(?:y|ies) in (\d+\.\d) ms \((\d+\.\d) ms per query; "
                  r"engine load (\d+\.\d) s\)$")


def timing_lines(err: str) -> list[re.Match]:
    """The ``-v`` lines of stderr (INFO log lines may stand beside them)."""
    return [m for m in (LINE.match(line) for line in err.splitlines()) if m]


def test_the_line_says_queries_total_per_query_and_load():
    assert timing_line(3, 0.0412, 1.94) == "retrieved 3 queries in 41.2 ms (13.7 ms per query; engine load 1.9 s)"
    assert timing_line(1, 0.0081, 0.25) == "retrieved 1 query in 8.1 ms (8.1 ms per query; engine load 0.2 s)"


@pytest.fixture
def fake_idx(tmp_path, monkeypatch, capsys):
    """An openie index of CORPUS by the fake models (the command line's engine made of them)."""
    monkeypatch.setattr(cli, "_make_rag", lambda args, **kw: make_rag(args.save_dir, llm=ScriptedLLM(toy_respond),
                                                                      use_filter=False))
    return cli_index(main, CORPUS, tmp_path / "idx", capsys)


@pytest.mark.parametrize("where", ["after", "before"])
def test_verbose_prints_the_time_on_stderr_and_leaves_stdout_alone(fake_idx, capsys, where):
    """``retrieve -v`` and ``hippo-engine -v retrieve`` alike; the JSON on stdout is the same as without -v."""
    cmd = ["retrieve", "--save-dir", fake_idx, "-q", "Who mapped Lake Veloria?", "-q", "Where is Velor?", "--json"]
    assert main(cmd) == 0
    plain = capsys.readouterr()
    assert main(cmd + ["-v"] if where == "after" else ["-v"] + cmd) == 0
    verbose = capsys.readouterr()
    assert verbose.out == plain.out and json.loads(verbose.out)["solutions"]
    assert timing_lines(plain.err) == []
    (m,) = timing_lines(verbose.err)
    total, per = float(m.group(2)), float(m.group(3))
    assert m.group(1) == "2" and total > 0 and abs(per - total / 2) <= 0.06


@pytest.mark.slow
def test_real_engine_on_the_sample_corpus(tmp_path, capsys):
    """The packaged embedder and spaCy (an extractor=ner index of the bundled sample, no LLM): the load
    (models, graph) is timed apart, so the retrieval's own time is well under the load's."""
    data = json.loads(resources.files("hippo_engine").joinpath("data/sample_corpus.json").read_text("utf-8"))
    corpus = tmp_path / "sample.json"
    corpus.write_text(json.dumps(data["corpus"]))
    idx = str(tmp_path / "idx")
    assert main(["index", str(corpus), "--save-dir", idx, "--extractor", "ner", "--quiet"]) == 0
    questions = [q["question"] for q in data["questions"][:3]]
    cmd = ["retrieve", "--save-dir", idx, "--json", "--quiet"] + [a for q in questions for a in ("-q", q)]
    capsys.readouterr()
    assert main(cmd) == 0
    plain = capsys.readouterr()
    assert main(cmd + ["-v"]) == 0
    verbose = capsys.readouterr()
    assert verbose.out == plain.out and len(json.loads(verbose.out)["solutions"]) == len(questions)
    (m,) = timing_lines(verbose.err)
    assert int(m.group(1)) == len(questions)
    assert float(m.group(2)) / 1000 < float(m.group(4)) + 0.1     # the models loaded before the clock started
