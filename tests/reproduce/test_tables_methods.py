"""Retrieval configurations of the tables (reproduce/tables/methods.py)."""
from reproduce.tables.methods import ablation_methods, dense_method, hippo_method, method


def test_config_and_llm_use():
    assert hippo_method(True).config == {} and hippo_method(True).needs_llm
    off = hippo_method(False)
    assert off.config == {"use_filter": False} and not off.needs_llm and off.label == "HippoRAG 2 (filter off)"
    ner = method("ner", "NER", linking="ner", use_filter=False)
    assert ner.config == {"linking": "ner"} and ner.needs_llm  # use_filter has no effect without fact linking
    assert not method("query", "q", linking="query").needs_llm
    assert dense_method("d").dense and not dense_method("d").needs_llm


def test_ablation_rows():
    assert [m.key for m in ablation_methods(True)] == ["full", "ner", "query", "no_passage", "no_filter"]
    assert [m.key for m in ablation_methods(False)] == ["full", "ner", "query", "no_passage"]
    assert ablation_methods(False)[0].label == "HippoRAG 2 (full, filter off)"
