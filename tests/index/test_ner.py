"""LLM-free facts: the packaged spaCy pipeline, sentences as hyperedges, and their storage."""
import pytest
from fakes import NgramEncoder
from helpers import CORPUS

from hippo_engine.config import HippoConfig
from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import chunk_id, entity_id
from hippo_engine.index.facts import normalize_hyperedges
from hippo_engine.index.ner import SKIPPED_LABELS, NERExtractor, doc_hyperedges, passage_title
from hippo_engine.index.state import IndexState as Index
from hippo_engine.store import StoreError


@pytest.fixture(scope="module")
def extracted():
    return NERExtractor().run({chunk_id(p): p for p in CORPUS})


def test_titles_are_short_first_lines():
    assert passage_title("Lake Veloria\nLake Veloria lies in the Orsk Highlands.") == "Lake Veloria"
    assert passage_title("One line only, no title.") is None
    assert passage_title(" ".join(["word"] * 13) + "\nbody") is None
    assert passage_title("--\nbody") is None


def test_sentences_become_hyperedges_with_their_entities(extracted):
    pid = chunk_id(CORPUS[0])
    hs = extracted[pid]
    assert [h.text for h in hs] == ["Lake Veloria", "Lake Veloria lies in the Orsk Highlands.",
                                    "Ilse Marrow mapped Lake Veloria in 1873."]   # the title line is a fact
    assert all("Lake Veloria" in h.entities for h in hs)          # the title joins every sentence
    assert "1873" in hs[2].entities
    assert set(extracted) == {chunk_id(p) for p in CORPUS}


def test_numeric_entities_are_skipped():
    import spacy

    doc = NERExtractor().pipeline()("Report\nThe team sold 3,000 tickets for 45 dollars to Anna Berg.")
    assert isinstance(doc, spacy.tokens.Doc)
    ents = {e for h in doc_hyperedges(doc, "Report") for e in h.entities}
    assert "Anna Berg" in ents and not any(any(c.isdigit() for c in e) for e in ents)


def test_query_entities():
    out = NERExtractor().query_entities(["Which city did Barack Obama visit in 2010?", "what is two plus two"])
    assert out == [["Barack Obama", "2010"], []]


def test_one_pipeline_serves_passages_and_queries(monkeypatch):
    """Queries run the passage pipeline with its sentence components off: one model loaded, and
    the entities those of a pipeline loaded without them (queries with newlines and several
    sentences, where boundaries could matter)."""
    import hippo_engine.models.spacy_ner as spacy_ner
    loads = []
    real = spacy_ner.load_pipeline
    monkeypatch.setattr(spacy_ner, "load_pipeline", lambda *a, **k: loads.append(k) or real(*a, **k))
    ner = NERExtractor()
    ner.run({"p": CORPUS[0]})
    queries = [*CORPUS, "Who founded Velor Press?\nAnna Berg. Which city, London or Paris?", "Ilse Marrow"]
    got = ner.query_entities(queries)
    assert loads == [{"sentences": True}]
    plain = real(sentences=False)
    assert got == [[e.text for e in d.ents if e.label_ not in SKIPPED_LABELS] for d in plain.pipe(queries)]
    assert "senter" in ner.pipeline().pipe_names     # switched off for the call, not removed


def test_normalize_hyperedges_dedupes_and_drops_empty():
    hs = normalize_hyperedges([Hyperedge("A b.", ("Ilse Marrow", "ilse  marrow", "!!")), Hyperedge("x", ("--",))],
                              "unicode")
    assert hs == [Hyperedge("A b.", ("ilse marrow",))]


def test_hyperedges_round_trip_and_extractors_do_not_mix(tmp_path, extracted):
    enc = NgramEncoder()
    passages = {chunk_id(p): p for p in CORPUS}
    idx = Index(tmp_path, HippoConfig(show_progress=False, extractor="ner"), lambda: enc, enc.name)
    rep = idx.add(passages, hyperedges=extracted, extractor="ner")
    assert rep["added"] == len(CORPUS) and rep["new_facts"] > len(CORPUS)
    assert idx.extractor == "ner"
    stats = idx.graph.stats()
    assert stats["fact_edges"] > 0 and stats["context_edges"] > 0 and stats["passage_nodes"] == len(CORPUS)
    # entity-entity edges are sentence co-occurrences: each sentence adds 1 / (m - 1) per pair
    edges = idx.graph.edge_dict()
    a, b = sorted([entity_id("lake veloria"), entity_id("1873")])
    m = len(extracted[chunk_id(CORPUS[0])][2].entities)   # the one sentence naming both
    assert edges[(a, b)] == round(2**20 / (m - 1)) / 2**20
    fe = idx.fact_entities()
    assert len(fe) == rep["new_facts"] and all(isinstance(v, tuple) and v for v in fe.values())
    idx.close()
    again = Index(tmp_path, HippoConfig(show_progress=False, extractor="ner"), lambda: enc, enc.name)
    assert again.passage_hyperedges == idx.passage_hyperedges and again.fact_entities() == fe
    with pytest.raises(StoreError, match="extractor='ner'"):
        again.add({"chunk-x": "X\nnew text"}, triples={"chunk-x": [("a", "b", "c")]}, extractor="openie")
    again.close()


def test_a_passage_over_spacys_limit_is_refused_naming_it():
    ner = NERExtractor()
    assert ner.max_chars == 1_000_000
    with pytest.raises(ValueError, match=r"passage 'p-big' has 1,000,001 characters; spaCy takes at most "
                                         r"1,000,000: split the document or set chunk_size"):
        ner.run({"p-small": CORPUS[0], "p-big": "a" * 1_000_001})


def test_long_queries_are_cut_not_refused():
    from hippo_engine.index.ner import cut_long_queries
    assert cut_long_queries(["short", "x" * 12], 10) == ["short", "x" * 10]
    ner = NERExtractor()
    ner.pipeline().max_length = 200
    ents = ner.query_entities(["Ilse Marrow founded the Velor Press in London in 1901. " + "Tell me more. " * 30])
    assert ents == [["the Velor Press", "London", "1901"]]
