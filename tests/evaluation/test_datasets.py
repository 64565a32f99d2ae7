"""Dataset loaders: HippoRAG 2 release format, HippoRAG v1 formats, lookup and gold matching."""
import json

import pytest

from hippo_engine.evaluation.datasets import (
    DatasetError,
    corpus_docs,
    find_dataset,
    gold_answers_for,
    load_dataset,
    parse_questions,
)


def write(folder, name, questions, corpus):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(questions), encoding="utf-8")
    (folder / f"{name}_corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    return folder


CORPUS = [{"title": "Alpha", "text": "Alpha is a town. It lies on the Beta river."},
          {"title": "Beta", "text": "The Beta river flows north."},
          {"title": "Gamma", "text": "Gamma is unrelated."}]


def test_musique_style_paragraphs(tmp_path):
    qs = [{"id": "2hop__1", "question": "Which river flows by Alpha?", "answer": "Beta",
           "answer_aliases": ["Beta river", "Beta"],
           "paragraphs": [{"idx": 0, "title": "Alpha", "paragraph_text": CORPUS[0]["text"], "is_supporting": True},
                          {"idx": 1, "title": "Beta", "paragraph_text": CORPUS[1]["text"], "is_supporting": True},
                          {"idx": 2, "title": "Gamma", "paragraph_text": CORPUS[2]["text"], "is_supporting": False}]}]
    ds = load_dataset(write(tmp_path / "musique", "musique", qs, CORPUS))
    assert ds.name == "musique" and len(ds) == 1
    assert ds.docs == [f"{c['title']}\n{c['text']}" for c in CORPUS]
    assert ds.gold_docs == [[ds.docs[0], ds.docs[1]]]
    assert ds.gold_answers == [["Beta", "Beta river"]]
    assert ds.question_ids == ["2hop__1"] and ds.openie_file is None
    assert ds.gold_match == {"exact": 2}


def test_2wiki_context_style_joins_sentences_with_space(tmp_path):
    corpus = [{"title": "Alpha", "text": "Alpha is a town. It lies on the Beta river."},
              {"title": "Beta", "text": "The Beta river flows north."}]
    qs = [{"_id": "abc", "question": "q?", "answer": "Beta",
           "context": [["Alpha", ["Alpha is a town.", "It lies on the Beta river."]],
                       ["Beta", ["The Beta river flows north."]], ["Zeta", ["Distractor."]]],
           "supporting_facts": [["Alpha", 1], ["Beta", 0], ["Alpha", 0]]}]
    ds = load_dataset(write(tmp_path / "2wiki", "2wikimultihopqa", qs, corpus))
    assert ds.gold_docs == [["Alpha\nAlpha is a town. It lies on the Beta river.", "Beta\nThe Beta river flows north."]]
    assert ds.gold_match == {"exact": 2} and ds.question_ids == ["abc"]


def test_hotpotqa_v1_dict_corpus_and_empty_join(tmp_path):
    corpus = {"Alpha": ["Alpha is a town.", " It lies on the Beta river."], "Beta": "The Beta river flows north."}
    qs = [{"_id": "h1", "question": "q?", "answer": "yes",
           "context": [["Alpha", ["Alpha is a town.", " It lies on the Beta river."]]],
           "supporting_facts": [["Alpha", 0]]}]
    ds = load_dataset(write(tmp_path, "hotpotqa", qs, corpus))
    assert ds.docs == ["Alpha\nAlpha is a town. It lies on the Beta river.", "Beta\nThe Beta river flows north."]
    assert ds.gold_docs == [[ds.docs[0]]] and ds.gold_match == {"exact": 1}


def test_context_gold_resolved_by_title_when_text_differs():
    docs = ["Alpha\nAlpha is a town (pop. 3).", "Beta\nOne.", "Beta\nTwo  words."]
    samples = [{"question": "q1", "answer": "a", "context": [["Alpha", ["Alpha is a town."]]],
                "supporting_facts": [["Alpha", 0]]},
               {"question": "q2", "answer": "a", "context": [["Beta", ["Two", "words."]]],
                "supporting_facts": [["Beta", 0]]},
               {"question": "q3", "answer": "a", "context": [["Beta", ["Three."]], ["Omega", ["x"]]],
                "supporting_facts": [["Beta", 0], ["Omega", 0]]}]
    qs, gold, answers, ids, counts = parse_questions(samples, docs, "2wikimultihopqa")
    assert gold[0] == ["Alpha\nAlpha is a town (pop. 3)."]          # unique title
    assert gold[1] == ["Beta\nTwo  words."]                         # same title twice: text decides
    assert gold[2] == ["Beta\nThree.", "Omega\nx"]                  # nothing matches: kept as rebuilt
    assert counts == {"by_title": 2, "unmatched": 2}
    assert ids == ["0", "1", "2"]


def test_contexts_style_and_whitespace_match():
    docs = ["T\nsome   text", "U\nother"]
    samples = [{"question": "q", "answer": ["x", "y"],
                "contexts": [{"title": "T", "text": "some text", "is_supporting": True},
                             {"title": "U", "text": "other", "is_supporting": False}]}]
    _, gold, answers, _, counts = parse_questions(samples, docs)
    assert gold == [["T\nsome   text"]] and counts == {"by_whitespace": 1}
    assert answers == [["x", "y"]]


def test_no_evidence_gives_no_gold_docs(tmp_path):
    qs = [{"id": "n1", "question": "What?", "answer": "x"}]
    ds = load_dataset(write(tmp_path, "narrativeqa_toy", qs, CORPUS))
    assert ds.gold_docs is None and ds.gold_answers == [["x"]]


def test_gold_answer_fields():
    assert gold_answers_for({"answer": "A", "answer_aliases": ["B", "A"]}) == ["A", "B"]
    assert gold_answers_for({"gold_ans": ["A", "C"]}) == ["A", "C"]
    assert gold_answers_for({"reference": "R"}) == ["R"]
    popqa = {"obj": "Paris", "possible_answers": '["Paris", "City of Light"]', "o_wiki_title": "Paris",
             "o_aliases": ["Lutetia"]}
    assert gold_answers_for(popqa) == ["Paris", "City of Light", "Lutetia"]
    assert gold_answers_for({"question": "q"}) == []


def test_corpus_formats_and_errors():
    assert corpus_docs([{"idx": 0, "title": "A", "text": "x"}, {"title": "A", "text": "x"}]) == ["A\nx"]
    assert corpus_docs({"A": ["x", "y"], "B": "z"}) == ["A\nxy", "B\nz"]
    with pytest.raises(DatasetError):
        corpus_docs([{"title": "A"}])
    with pytest.raises(DatasetError):
        corpus_docs("not a corpus")
    with pytest.raises(DatasetError, match="question"):
        parse_questions([{"answer": "x"}], [])


def test_v1_train_files_and_openie_beside_them(tmp_path):
    folder = write(tmp_path / "musique" / "hipporag_v1_train", "musique_train",
                   [{"id": "1", "question": "q", "answer": "a",
                     "paragraphs": [{"title": "Beta", "paragraph_text": CORPUS[1]["text"], "is_supporting": True}]}],
                   CORPUS)
    (folder / "openie_musique_train_results_ner_gpt-3.5-turbo-1106_3.json").write_text("{}")
    ds = load_dataset(folder)
    assert ds.name == "musique_train" and ds.openie_file.name.startswith("openie_musique_train")
    # by name under a data root, nested two levels down
    assert find_dataset("musique_train", data_root=tmp_path) == folder / "musique_train.json"
    # by the questions file itself
    assert load_dataset(folder / "musique_train.json").gold_docs == [["Beta\nThe Beta river flows north."]]


def test_lookup_by_name_uses_env_data_root(tmp_path, monkeypatch):
    write(tmp_path / "data" / "popqa", "popqa", [{"question": "q", "answer": "a"}], CORPUS)
    monkeypatch.setenv("HIPPO_DATA_DIR", str(tmp_path / "data"))
    assert load_dataset("popqa").name == "popqa"


def test_not_found_lists_what_was_looked_for(tmp_path):
    (tmp_path / "narrativeqa").mkdir()
    (tmp_path / "narrativeqa" / "narrativeqa_dev_10_doc_corpus.json").write_text("[]")
    with pytest.raises(DatasetError) as e:
        load_dataset("narrativeqa", data_root=tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "narrativeqa.json") in msg and "no question file" in msg and "HIPPO_DATA_DIR" in msg


def test_folder_with_several_datasets(tmp_path):
    write(tmp_path, "musique", [{"question": "q", "answer": "a"}], CORPUS)
    write(tmp_path, "hotpotqa", [{"question": "q", "answer": "a"}], CORPUS)
    with pytest.raises(DatasetError, match="several datasets"):
        load_dataset(tmp_path)
    assert load_dataset(tmp_path, name="hotpotqa").name == "hotpotqa"
    # an OpenIE file in a shared folder is used only by the dataset it names
    (tmp_path / "openie_results_ner_some-llm.json").write_text("{}")
    assert load_dataset(tmp_path, name="hotpotqa").openie_file is None
    (tmp_path / "openie_musique_results_ner_some-llm.json").write_text("{}")
    assert load_dataset(tmp_path, name="musique").openie_file.name == "openie_musique_results_ner_some-llm.json"
    assert load_dataset(tmp_path / "hotpotqa.json").openie_file is None


def test_head_keeps_corpus():
    from hippo_engine.evaluation.datasets import Dataset
    ds = Dataset("x", ["a\nb"], ["q1", "q2"], [["a\nb"], []], [["1"], ["2"]], question_ids=["1", "2"])
    h = ds.head(1)
    assert h.questions == ["q1"] and h.gold_docs == [["a\nb"]] and h.docs == ds.docs
    assert ds.head(None) is ds and ds.head(5) is ds


def test_real_musique_train_subset(musique_dir):
    ds = load_dataset(musique_dir)
    assert ds.name == "musique_train" and len(ds) == 100 and len(ds.docs) == 1890
    assert ds.gold_match == {"exact": 237}
    assert all(g and all(d in set(ds.docs) for d in g) for g in ds.gold_docs)
    assert ds.openie_file is not None and "gpt-3.5" in ds.openie_file.name
