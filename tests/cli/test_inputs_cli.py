"""What ``hippo-engine index`` reads (:mod:`hippo_engine.cli.inputs`): folders of .txt/.md files, text
files, JSON, JSONL and CSV, with ids and metadata; every error names the file."""
import json

import pytest

from hippo_engine.cli.inputs import read_corpus_paths, read_documents, read_queries
from hippo_engine.ids import document_id


def test_a_folder_of_text_and_markdown_files(tmp_path):
    (tmp_path / "notes" / "sub").mkdir(parents=True)
    (tmp_path / "notes" / "velor_fair.txt").write_text("Velor hosts the Amber Fair.\nIt is held each autumn.\n")
    (tmp_path / "notes" / "sub" / "marrow.md").write_text("# Ilse Marrow\n\nIlse Marrow mapped Lake Veloria.")
    (tmp_path / "notes" / "plain.md").write_text("No heading here.")
    (tmp_path / "notes" / "empty.txt").write_text("  \n")
    (tmp_path / "notes" / "data.json").write_text("[]")                  # not a text file: not read
    (tmp_path / "notes" / ".hidden").mkdir()
    (tmp_path / "notes" / ".hidden" / "x.txt").write_text("secret")
    c = read_corpus_paths([tmp_path / "notes"])
    assert c.ids == ["plain.md", "sub/marrow.md", "velor_fair.txt"]
    assert c.docs == ["plain\nNo heading here.", "Ilse Marrow\nIlse Marrow mapped Lake Veloria.",
                      "velor fair\nVelor hosts the Amber Fair.\nIt is held each autumn."]
    assert c.skipped == [str(tmp_path / "notes" / "empty.txt")] and c.metadata is None
    assert read_documents(tmp_path / "notes" / "sub" / "marrow.md") == (
        ["Ilse Marrow\nIlse Marrow mapped Lake Veloria."], ["marrow.md"])
    (tmp_path / "nothing").mkdir()
    with pytest.raises(ValueError, match=r"nothing: no \.txt or \.md files"):
        read_corpus_paths([tmp_path / "nothing"])


def test_jsonl_records_with_metadata_and_run_metadata(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [
        {"id": "a", "title": "A", "text": "first", "metadata": {"user": "alice", "year": 2021}},
        {"id": "b", "text": "second"}]))
    c = read_corpus_paths([f], {"user": "bob", "source": "import"})
    assert c.docs == ["A\nfirst", "second"] and c.ids == ["a", "b"]
    assert c.metadata == [{"user": "alice", "source": "import", "year": 2021}, {"user": "bob", "source": "import"}]
    assert read_corpus_paths([f]).metadata == [{"user": "alice", "year": 2021}, None]    # b brings none
    assert c.sources == [f"{f}: item 0", f"{f}: item 1"]
    f.write_text(json.dumps({"text": "x", "metadata": ["not", "an", "object"]}))
    with pytest.raises(ValueError, match=r"c\.jsonl: item 0: 'metadata' must be a JSON object"):
        read_corpus_paths([f])


def test_csv_with_a_header(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text('id,title,text,author,metadata\n'
                 'd1,Velor,"Velor is a town, with a fair.",Ilse,"{""year"": 1873}"\n'
                 'd2,,Brask is a capital.,,\n', encoding="utf-8")
    c = read_corpus_paths([f])
    assert c.docs == ["Velor\nVelor is a town, with a fair.", "Brask is a capital."] and c.ids == ["d1", "d2"]
    assert c.metadata == [{"year": 1873, "author": "Ilse"}, None]     # d2 brings none: its stored stays
    for body, message in (("title,body\nx,y\n", r"c\.csv: a CSV corpus needs a header with a 'text' column "
                                                r"\(found: title, body\)"),
                          ('text,metadata\nx,"{bad"\n', r"c\.csv, line 2: the 'metadata' cell is not valid JSON"),
                          ("text\nx,y\n", r"c\.csv, line 2: more cells than the header has columns")):
        f.write_text(body)
        with pytest.raises(ValueError, match=message):
            read_corpus_paths([f])


def test_sources_combine_and_ids_stay_unique(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("alpha text")
    j = tmp_path / "more.json"
    j.write_text(json.dumps(["loose document"]))
    c = read_corpus_paths([tmp_path / "d", j])
    assert c.ids == ["a.txt", document_id("loose document")]         # the id the engine would derive
    j.write_text(json.dumps([{"id": "a.txt", "text": "again"}]))
    with pytest.raises(ValueError, match=r"more\.json: item 0: id 'a\.txt' is also the id of .*a\.txt"):
        read_corpus_paths([tmp_path / "d", j])


def test_unreadable_files_are_named(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.txt: not UTF-8 text"):
        read_corpus_paths([bad])
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        read_corpus_paths([tmp_path / "missing.csv"])


def test_questions_from_a_text_file(tmp_path):
    f = tmp_path / "q.txt"
    f.write_text("Who mapped Lake Veloria?\n\nWhere is Velor?\n")
    assert read_queries(f) == (["Who mapped Lake Veloria?", "Where is Velor?"], None, None)
