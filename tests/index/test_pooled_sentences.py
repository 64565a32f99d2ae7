"""``sentence_vectors="pooled"``: sentence (fact) vectors of a ``ner`` index pooled from their passage's own
forward pass (hippo_engine.index.encoding.pooled_sentences), with the real packaged encoder and spaCy."""
from __future__ import annotations

import numpy as np
import pytest
from fakes import NoCallLLM
from helpers import CORPUS

from hippo_engine import HippoRAG
from hippo_engine.config import HippoConfig
from hippo_engine.datatypes import Hyperedge
from hippo_engine.errors import ConfigError
from hippo_engine.ids import chunk_id, hyperedge_id
from hippo_engine.index.encoding import sentence_spans
from hippo_engine.models.encoder import TransformersEncoder
from hippo_engine.store import StoreError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def enc() -> TransformersEncoder:
    return TransformersEncoder()


def ner_rag(path, enc, **kw):
    return HippoRAG(path, extractor="ner", llm=NoCallLLM(), encoder=enc, show_progress=False, **kw)


def vectors(rag, kind):
    st = rag.index_state.stores[kind]
    return {k: st.matrix[st.row(k)].copy() for k in st.ids}


def test_pooled_index_keeps_passage_and_entity_vectors_and_pools_sentences(tmp_path, enc):
    plain = ner_rag(tmp_path / "plain", enc)
    plain.index(CORPUS)
    pooled = ner_rag(tmp_path / "pooled", enc, sentence_vectors="pooled")
    pooled.index(CORPUS[:5])
    pooled.index(CORPUS[5:])                                   # a second batch: only its new sentences
    for kind in ("passage", "entity"):
        a, b = vectors(plain, kind), vectors(pooled, kind)
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    a, b = vectors(plain, "fact"), vectors(pooled, "fact")
    assert a.keys() == b.keys()
    pid = chunk_id(CORPUS[5])
    hyper = pooled.index_state.passage_hyperedges[pid]
    spans = [(0, s, e) for _, s, e in sentence_spans(CORPUS[5], hyper)]
    _, want, ok = enc.encode_spans([CORPUS[5]], spans)
    assert ok.all() and len(spans) == len(hyper) == 3         # the title line and two sentences
    for h, v in zip(hyper, want, strict=True):
        got = b[hyperedge_id(h)]
        assert np.abs(got - v).max() <= 1e-6 and not np.array_equal(got, a[hyperedge_id(h)])
    assert pooled.retrieve(["Which river does the capital of Kaldavia lie on?"])[0].docs[0].startswith("Brask")


def test_an_index_refuses_the_other_kind_of_sentence_vectors(tmp_path, enc):
    ner_rag(tmp_path / "pooled", enc, sentence_vectors="pooled").index(CORPUS[:2])
    ner_rag(tmp_path / "plain", enc).index(CORPUS[:2])
    with pytest.raises(StoreError, match="sentence_vectors='pooled'"):
        ner_rag(tmp_path / "pooled", enc)
    with pytest.raises(StoreError, match="sentence_vectors='encode'"):
        ner_rag(tmp_path / "plain", enc, sentence_vectors="pooled")
    ner_rag(tmp_path / "pooled", enc, sentence_vectors="pooled").index(CORPUS[2:3])    # the same kind extends it


def test_sentence_spans_follow_the_passage_and_match_joined_lines():
    text = "Title\nThe first line of a wrapped\nsentence ends here. Then another."
    hyper = [Hyperedge("Title", ("t",)), Hyperedge("The first line of a wrapped sentence ends here.", ("t",)),
             Hyperedge("Then another.", ("t",)), Hyperedge("Not in the passage.", ("t",))]
    got = [(text[s:e]) for _, s, e in sentence_spans(text, hyper)]
    assert got == ["Title", "The first line of a wrapped\nsentence ends here.", "Then another."]


def test_pooled_sentences_need_encoded_passages():
    assert HippoConfig().sentence_vectors == "encode"
    with pytest.raises(ConfigError, match="sentence_vectors"):
        HippoConfig(sentence_vectors="pooled", passage_vectors="sentence_mean")


def test_the_ray_executor_refuses_pooled_sentences(tmp_path):
    from fakes import NgramEncoder

    from hippo_engine.index.distributed.executor import RayExecutor

    rag = HippoRAG(tmp_path, extractor="ner", llm=NoCallLLM(), encoder=NgramEncoder(), show_progress=False,
                   sentence_vectors="pooled")
    with pytest.raises(ConfigError, match="Ray executor"):
        RayExecutor().index(rag, CORPUS[:2])                 # refused before any cluster is joined
    assert len(rag.index_state) == 0
