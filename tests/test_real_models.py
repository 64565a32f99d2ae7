"""End to end on the real default models: the packaged Qwen2.5-Coder-0.5B (OpenIE) and
all-MiniLM-L6-v2 (embeddings), real igraph, real files. Slow-ish (~1-2 minutes on 2 cores)."""
import pytest

from hippo_engine import HippoRAG

PASSAGES = [
    "Vellmar Observatory\nThe Vellmar Observatory was founded in 1894 by the astronomer Ilse Marrow on Mount Caldis.",
    "Ilse Marrow\nIlse Marrow was born in Dunhaven and later taught at Corvel University.",
]


@pytest.mark.slow
def test_index_with_default_local_llm(tmp_path):
    rag = HippoRAG(tmp_path, extractor="openie", show_progress=False, max_new_tokens=256)
    rep = rag.index(PASSAGES)
    assert rep["added"] == 2 and rep["openie_llm_passages"] == 2
    ents = {rag.index_state.stores["entity"].text(e) for e in rag.index_state.stores["entity"].ids}
    # sensible extraction: the named people/places of the passages become entity nodes
    assert {"ilse marrow"} <= ents
    assert len(ents & {"vellmar observatory", "mount caldis", "dunhaven", "corvel university"}) >= 2
    stats = rag.graph_stats()
    assert stats["fact_edges"] >= 2 and stats["context_edges"] >= 4 and stats["passage_nodes"] == 2
    # the OpenIE results were saved in the reference format and are reused without LLM calls
    assert rag.openie_path.exists()
    rag2 = HippoRAG(tmp_path / "again", extractor="openie", show_progress=False, max_new_tokens=256)
    rag2.import_openie(rag.openie_path)
    rag2._llm = None  # would load the model only if a call were needed

    rag2.index(PASSAGES)
    assert rag2._llm is None
    assert rag2.graph_stats() == stats
    # dense retrieval on the real embedder ranks the right passage first
    (sol,) = rag.retrieve_dpr(["Where was Ilse Marrow born?"])
    assert sol.docs[0] == PASSAGES[1]
