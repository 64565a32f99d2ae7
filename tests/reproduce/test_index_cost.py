"""``python -m reproduce index-cost`` (reproduce/index_cost.py): the ner index's time over a dense-only index's."""
import argparse
import json

import numpy as np
import pytest
from fakes import NgramEncoder
from helpers import CORPUS

from reproduce import index_cost
from reproduce.cli import build_parser


def _data_root(tmp_path, docs=CORPUS):
    """A data root holding the three corpus files, each with ``docs`` as ``{title, text}`` records."""
    root = tmp_path / "data"
    for rel in index_cost.CORPORA.values():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([{"title": d.split("\n", 1)[0], "text": d.split("\n", 1)[1]} for d in docs]))
    return root


def _args(tmp_path, root, *extra):
    argv = ["index-cost", "--data-root", str(root), "--out-dir", str(tmp_path / "out"), "--work",
            str(tmp_path / "work"), *extra]
    return build_parser().parse_args(argv), argv


def test_timed_encoder_adds_up_time_by_what_it_encodes():
    inner = NgramEncoder()
    enc = index_cost.TimedEncoder(inner)
    v = enc.encode(["a b", "c"], desc="Embedding entities (1/2)")
    enc.encode(["d"], desc="Embedding entities (2/2)")
    enc.encode(["e"], desc="Embedding facts")
    assert np.array_equal(v, inner.encode(["a b", "c"]))
    assert set(enc.clocks) == {"entities", "facts"}
    assert all(c.wall > 0 and c.cpu >= 0 for c in enc.clocks.values())
    assert enc.dim == inner.dim and enc.name == inner.name
    with pytest.raises(AttributeError):
        _ = enc.tokenizer      # the inner encoder's attributes, where it has them


def test_command_measures_every_corpus_and_writes_the_result(tmp_path, capsys):
    root = _data_root(tmp_path)
    args, argv = _args(tmp_path, root)
    assert index_cost.run(args, argv, encoder=NgramEncoder()) == 0
    out = capsys.readouterr().out
    for name in index_cost.CORPORA:
        assert f"{name}: ratio " in out
    results = json.loads((tmp_path / "out" / "README.json").read_text())
    assert [r["corpus"] for r in results] == list(index_cost.CORPORA)
    for r in results:
        ner = r["ner"]
        assert ner["counts"]["passage"] == len(CORPUS) == r["dense"][0]["passages"] == r["dense"][1]["passages"]
        assert ner["counts"]["fact"] >= len(CORPUS) and ner["counts"]["entity"] > 0
        assert set(ner["encode"]) == {"passages", "facts", "entities"}
        assert ner["spacy"]["wall"] > 0 and ner["entities_per_passage"] >= 2   # the title and one more
        assert ner["token_ratio"] > 1
        assert r["ratio_wall"] == pytest.approx(ner["wall_s"] / np.mean([d["wall_s"] for d in r["dense"]]))
        assert r["ratio_cpu"] == pytest.approx(ner["cpu_s"] / np.mean([d["cpu_s"] for d in r["dense"]]))
    md = (tmp_path / "out" / "README.md").read_text()
    assert "- `python -m reproduce index-cost` at engine commit" in md   # folders of this machine left out
    assert str(tmp_path) not in md and "| narrativeqa | `" in md
    assert md.count("\n- ") == 1 + 3   # the run, then stage timings, one line per corpus


def test_a_limit_and_one_corpus(tmp_path):
    args, argv = _args(tmp_path, _data_root(tmp_path), "--corpus", "2wiki", "--limit", "3", "--name", "small")
    assert index_cost.run(args, argv, encoder=NgramEncoder()) == 0
    (r,) = json.loads((tmp_path / "out" / "small.json").read_text())
    assert r["corpus"] == "2wiki" and r["ner"]["counts"]["passage"] == 3


def test_render_puts_saved_runs_side_by_side(tmp_path):
    root = _data_root(tmp_path)
    for name in ("a", "b"):
        args, argv = _args(tmp_path, root, "--corpus", "musique", "--limit", "2", "--name", name)
        index_cost.run(args, argv, encoder=NgramEncoder())
    saved = [tmp_path / "out" / f"{n}.json" for n in ("a", "b")]
    args, argv = _args(tmp_path, root, "--render", *map(str, saved), "--name", "both")
    assert index_cost.run(args, argv) == 0     # nothing measured: no encoder made
    both = json.loads((tmp_path / "out" / "both.json").read_text())
    assert both == json.loads(saved[0].read_text()) + json.loads(saved[1].read_text())
    md = (tmp_path / "out" / "both.md").read_text()
    assert md.count("| musique | `") == 4      # two rows in each table
    (tmp_path / "bad.json").write_text('{"not": "results"}')
    args, argv = _args(tmp_path, root, "--render", str(tmp_path / "bad.json"))
    with pytest.raises(SystemExit, match="bad.json"):
        index_cost.run(args, argv)


def test_a_missing_corpus_is_named(tmp_path):
    args, argv = _args(tmp_path, tmp_path / "nowhere", "--corpus", "musique")
    with pytest.raises(FileNotFoundError, match="musique_train_corpus.json"):
        index_cost.run(args, argv, encoder=NgramEncoder())
    args.limit = 0
    with pytest.raises(SystemExit, match="positive"):
        index_cost.run(args, argv, encoder=NgramEncoder())


def test_the_default_encoder_and_spacy_on_a_few_passages(tmp_path):
    """Real components: the packaged encoder (its tokenizer counts the tokens) and spaCy."""
    args, argv = _args(tmp_path, _data_root(tmp_path), "--corpus", "narrativeqa")
    assert index_cost.run(args, argv) == 0
    (r,) = json.loads((tmp_path / "out" / "README.json").read_text())
    tok = r["ner"]["tokens"]
    assert tok["passage"] > 8 * 10 and tok["entity"] >= 2 * r["ner"]["counts"]["entity"]   # [CLS] and [SEP]
    assert r["ner"]["token_ratio"] == pytest.approx(sum(tok.values()) / tok["passage"])
    assert r["dense"][0]["cpu_s"] > 0 and r["ratio_cpu"] > 1


def test_registered_as_a_command():
    sub = build_parser().parse_args(["index-cost", "--corpus", "musique"])
    assert isinstance(sub, argparse.Namespace) and sub.command == "index-cost" and sub.corpus == ["musique"]
