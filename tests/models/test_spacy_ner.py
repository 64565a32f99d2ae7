"""The packaged spaCy pipeline (hippo_engine/models/spacy_ner.py): only the components NER and sentences need.

The shared ``tok2vec`` feeds only the tagger and parser in ``en_core_web_sm``; ``ner`` and ``senter`` embed
tokens themselves. Dropping it must leave every entity and sentence boundary as it was."""
import json
from pathlib import Path

import pytest
import spacy
from helpers import CORPUS

from hippo_engine.models.spacy_ner import _components, drop_unheard_tok2vec, load_pipeline, model_dir

#: the MuSiQue subset (not ``from conftest import``: that name resolves to whichever conftest pytest loaded first)
MUSIQUE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "musique" / "hipporag_v1_train"

#: passages with titles, several sentences, blank lines, numbers, dates and non-Latin text
TEXTS = [*CORPUS,
         "Marie Curie\nMarie Curie was born in Warsaw on 7 November 1867. She moved to Paris in 1891.\n\n"
         "With Pierre Curie she won the Nobel Prize in Physics in 1903.",
         "The Treaty of Westphalia ended the Thirty Years' War in 1648; Sweden and France gained land.",
         "Tokyo Tower\n東京タワー is a tower in Minato, Tokyo, Japan. It is 333 metres tall.\n",
         "no capital letters here. just two sentences",
         "\n\nLeading newlines and a trailing one\n"]


def _musique_passages(n: int) -> list[str]:
    """The first ``n`` MuSiQue passages where the data is present (none elsewhere)."""
    path = MUSIQUE / "musique_train_corpus.json"
    if not path.is_file():
        return []
    return [f"{d['title']}\n{d['text']}" for d in json.loads(path.read_text(encoding="utf-8"))[:n]]


def _with_tok2vec():
    """The pipeline as it was loaded before: the shared tok2vec kept in front of senter and ner."""
    path = model_dir()
    keep = {"tok2vec", "ner", "senter"}
    nlp = spacy.load(path, exclude=[c for c in _components(path) if c not in keep])
    nlp.enable_pipe("senter")
    load_pipeline()   # registers the newline component
    nlp.add_pipe("hippo_newline_boundaries", before="senter")
    return nlp


def _parsed(nlp, texts):
    return [([(e.start, e.end, e.label_, e.text) for e in d.ents], [s.start for s in d.sents])
            for d in nlp.pipe(texts, batch_size=16)]


def test_only_the_components_ner_and_sentences_need():
    assert load_pipeline(sentences=True).pipe_names == ["hippo_newline_boundaries", "senter", "ner"]
    assert load_pipeline(sentences=False).pipe_names == ["ner"]


def test_dropping_tok2vec_changes_no_entity_and_no_sentence():
    texts = TEXTS + _musique_passages(150)
    before, after = _with_tok2vec(), load_pipeline()
    assert "tok2vec" in before.pipe_names
    assert _parsed(after, texts) == _parsed(before, texts)
    ents = sum(len(e) for e, _ in _parsed(after, texts))
    assert ents > len(texts)   # the comparison saw entities, not empty documents


@pytest.mark.parametrize("listener", ["tagger", "parser"])
def test_a_tok2vec_someone_listens_to_is_kept(listener):
    path = model_dir()
    nlp = spacy.load(path, exclude=[c for c in _components(path) if c not in {"tok2vec", listener, "ner"}])
    assert drop_unheard_tok2vec(nlp) == []
    assert "tok2vec" in nlp.pipe_names
    nlp.remove_pipe(listener)
    assert drop_unheard_tok2vec(nlp) == ["tok2vec"]
    assert nlp.pipe_names == ["ner"]
