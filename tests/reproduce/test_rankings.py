"""``python -m reproduce rankings`` (reproduce/rankings.py): Recall@k and the rankings hash, on the toy corpus."""
import hashlib
import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from fakes import NgramEncoder, NoCallLLM, ScriptedLLM
from helpers import CORPUS, toy_respond
from toy_tables import make_dataset

from hippo_engine import HippoRAG
from reproduce import rankings
from reproduce.cli import build_parser


def _sol(docs, scores):
    return SimpleNamespace(question="q", docs=list(docs), doc_scores=np.asarray(scores, dtype=np.float64))


def test_hash_is_canonical_and_sees_every_bit_of_a_score():
    sols = [_sol(CORPUS[:3], [0.5, 0.25, 0.125]), _sol(CORPUS[3:5], [1.0, 1 / 3])]
    payload = rankings.ranking_payload(sols)
    assert payload[0][0] == ["chunk-" + hashlib.md5(CORPUS[0].encode()).hexdigest(), (0.5).hex()]
    h = rankings.rankings_hash(payload)
    assert len(h) == 16 and int(h, 16) >= 0
    assert rankings.rankings_hash(rankings.ranking_payload(sols)) == h   # deterministic
    assert rankings.rankings_hash(json.loads(rankings.canonical_json(payload))) == h
    bumped = [_sol(CORPUS[:3], [0.5, np.nextafter(0.25, 1.0), 0.125]), sols[1]]   # one ulp
    assert rankings.rankings_hash(rankings.ranking_payload(bumped)) != h
    swapped = [_sol([CORPUS[1], CORPUS[0], CORPUS[2]], [0.5, 0.25, 0.125]), sols[1]]
    assert rankings.rankings_hash(rankings.ranking_payload(swapped)) != h
    many = [_sol(CORPUS * 4, np.linspace(1, 0, 32))]
    assert len(rankings.ranking_payload(many)[0]) == rankings.TOP == 20


def test_recall_is_the_tables_definition():
    sols = [_sol(CORPUS[:5], [5, 4, 3, 2, 1]), _sol(CORPUS[5:], [3, 2, 1])]
    gold = [[CORPUS[1], CORPUS[4], CORPUS[1]], [CORPUS[0]]]
    r = rankings.recall_at(sols, gold, (1, 2, 5))
    assert r == {1: 0.0, 2: 25.0, 5: 50.0}


@pytest.fixture()
def toy_data(tmp_path):
    """The toy dataset with an OpenIE file made by the toy LLM, as the released file is for MuSiQue."""
    data = make_dataset(tmp_path / "data" / "toyset")
    gen = HippoRAG(tmp_path / "gen", llm=ScriptedLLM(toy_respond), encoder=NgramEncoder(), show_progress=False)
    gen.index(CORPUS)
    gen.close()
    (openie,) = (tmp_path / "gen").glob("openie_results_ner_*.json")
    shutil.copy(openie, data / "openie_toyset_results.json")
    return data


def _run(argv, capsys):
    args = build_parser().parse_args(["rankings", *argv])
    assert rankings.run(args, argv, llm=NoCallLLM(), encoder=NgramEncoder()) == 0
    return capsys.readouterr().out


def test_command_builds_reuses_and_hashes_the_rankings(toy_data, tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "out" / "r.md"
    argv = ["--variant", "openie", "--data", str(toy_data), "--work", str(work), "--out", str(out)]
    first = _run(argv, capsys)
    (line,) = [ln for ln in first.splitlines() if ln.startswith("openie:")]
    h = line.split("hash ")[1].split()[0]
    assert "R@1 " in line and "R@20 " in line and "built by this run" in line
    payload = json.loads((work / "openie" / "rankings.json").read_text())
    assert len(payload) == 6 and rankings.rankings_hash(payload) == h
    text = out.read_text()
    assert f"`{h}`" in text and "python -m reproduce rankings --variant openie\n" in text
    assert str(tmp_path) not in text and "load average" in text
    again = _run(argv, capsys)   # the index is reused: same figures, same hash
    (line2,) = [ln for ln in again.splitlines() if ln.startswith("openie:")]
    assert "reused" in line2 and line2.split("(index")[0] == line.split("(index")[0]
    # a changed score changes the hash
    payload[0][0][1] = float.hex(float.fromhex(payload[0][0][1]) * (1 + 2 ** -52))
    assert rankings.rankings_hash(payload) != h


def test_missing_data_is_skipped_with_a_message(tmp_path, capsys):
    out = _run(["--data", str(tmp_path / "absent"), "--work", str(tmp_path / "w")], capsys)
    assert "skipped" in out and "SOURCES.md" in out
    assert not (tmp_path / "w").exists()
