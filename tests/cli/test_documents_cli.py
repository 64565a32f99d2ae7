"""``hippo-engine index`` (fakes): metadata errors name the file before an index exists, ``--metadata``
must be an object, empty files are skipped aloud, ``--openie`` means the openie extractor."""
import json

import pytest
from helpers import CORPUS, make_rag

import hippo_engine.cli.common as cli
from hippo_engine.cli import main


@pytest.fixture
def fake_engine(monkeypatch):
    seen = []

    def make(args, **kw):
        seen.append(args.extractor)
        return make_rag(args.save_dir, **({"extractor": args.extractor} if args.extractor else {}))
    monkeypatch.setattr(cli, "_make_rag", make)
    return seen


def test_bad_metadata_names_the_file_and_creates_nothing(tmp_path, capsys, fake_engine):
    f = tmp_path / "c.jsonl"
    f.write_text(json.dumps({"text": CORPUS[0], "metadata": {"score": float("nan")}}).replace("NaN", "1e999"))
    assert main(["index", str(f), "--save-dir", str(tmp_path / "idx")]) == 2
    err = capsys.readouterr().err
    assert f"{f}: item 0: metadata" in err and not (tmp_path / "idx").exists() and fake_engine == []
    with pytest.raises(SystemExit) as e:
        main(["index", str(f), "--save-dir", str(tmp_path / "idx"), "--metadata", '["not", "an object"]'])
    assert e.value.code == 2 and "must be a JSON object" in capsys.readouterr().err


def test_empty_files_are_skipped_aloud_and_nothing_to_index_is_an_error(tmp_path, capsys, fake_engine):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "empty.md").write_text("\n")
    (tmp_path / "d" / "velor.txt").write_text(CORPUS[2])
    assert main(["index", str(tmp_path / "d"), "--save-dir", str(tmp_path / "idx")]) == 0
    out = capsys.readouterr()
    assert f"skipping empty file {tmp_path / 'd' / 'empty.md'}" in out.err and "1 added" in out.out
    assert main(["index", str(tmp_path / "d" / "empty.md"), "--save-dir", str(tmp_path / "idx")]) == 2
    assert "no documents to index in" in capsys.readouterr().err


def test_openie_results_mean_the_openie_extractor(tmp_path, capsys, fake_engine):
    src = make_rag(tmp_path / "src")
    src.index(CORPUS[:2])
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps(CORPUS[:2]))
    assert main(["index", str(corpus), "--save-dir", str(tmp_path / "idx"), "--openie", str(src.openie_path)]) == 0
    assert fake_engine == ["openie"] and "imported OpenIE results for 2 passages" in capsys.readouterr().out
