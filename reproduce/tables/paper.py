"""The HippoRAG 2 paper's figures (its tables) and the paper column of a dataset."""
from __future__ import annotations

#: Llama-3.3-70B-Instruct (OpenIE, filter, reader) and NV-Embed-v2 (7B).
PAPER_SETUP = "Llama-3.3-70B-Instruct for OpenIE, filter and reader; NV-Embed-v2 embedder"
PAPER_COLUMNS = ("NQ", "PopQA", "MuSiQue", "2Wiki", "HotpotQA")
PAPER_RECALL = {  # (Recall@2, Recall@5)
    "dense": {"NQ": (45.3, 75.4), "PopQA": (45.3, 51.0), "MuSiQue": (52.7, 69.7), "2Wiki": (67.1, 76.5),
              "HotpotQA": (84.1, 94.5)},
    "hipporag2": {"NQ": (45.6, 78.0), "PopQA": (43.9, 51.7), "MuSiQue": (56.1, 74.7), "2Wiki": (76.2, 90.4),
                  "HotpotQA": (83.5, 96.3)},
}
PAPER_ABLATION_R5 = {  # Recall@5; the paper reports MuSiQue, 2Wiki and HotpotQA only
    "full": {"MuSiQue": 74.7, "2Wiki": 90.4, "HotpotQA": 96.3},
    "ner": {"MuSiQue": 53.8, "2Wiki": 91.2, "HotpotQA": 78.8},
    "query": {"MuSiQue": 44.9, "2Wiki": 65.5, "HotpotQA": 68.3},
    "no_passage": {"MuSiQue": 63.7, "2Wiki": 90.3, "HotpotQA": 88.9},
    "no_filter": {"MuSiQue": 73.0, "2Wiki": 90.7, "HotpotQA": 95.4},
}
PAPER_OTHER_DENSE_MUSIQUE_R5 = (("GTE-Qwen2-7B", 63.6, 68.8), ("GritLM-7B", 66.0, 71.6), ("NV-Embed-v2", 69.7, 74.7))
PAPER_QA_F1 = {
    "dense": {"NQ": 61.9, "PopQA": 55.7, "MuSiQue": 45.7, "2Wiki": 61.5, "HotpotQA": 75.3},
    "hipporag2": {"NQ": 63.3, "PopQA": 56.2, "MuSiQue": 48.6, "2Wiki": 71.0, "HotpotQA": 75.5},
}
PAPER_GRAPH = {"MuSiQue": {"entity_nodes": 85_288, "passage_nodes": 11_656, "fact_edges": 140_830,
                           "synonymy_edges": 1_125_951, "context_edges": 132_586}}
PAPER_COST = {"MuSiQue": {"indexing_min": 99.5, "query_s": 1.2}}
#: Official names of the paper's question sets; other names (e.g. ``musique_train``) are
#: compared with the same paper column but flagged as a different question set.
PAPER_CANONICAL = {"NQ": "nq_rear", "PopQA": "popqa", "MuSiQue": "musique", "2Wiki": "2wikimultihopqa",
                   "HotpotQA": "hotpotqa"}
#: The passage-node weights of the paper's sweep (Table 5).
WEIGHTS = (0.01, 0.05, 0.1, 0.3, 0.5)


def paper_column(dataset_name: str) -> str | None:
    """The paper's column for a dataset name (``musique_train`` -> ``MuSiQue``), or ``None``."""
    n = dataset_name.lower()
    for prefix, col in (("musique", "MuSiQue"), ("2wiki", "2Wiki"), ("hotpotqa", "HotpotQA"),
                        ("nq", "NQ"), ("popqa", "PopQA")):
        if n.startswith(prefix):
            return col
    return None

#: Recall@k (%) of other systems, measured elsewhere with their public code, NOT by these commands:
#: dataset name -> (label, {k: recall}). LinearRAG: spaCy en_core_web_sm, all-MiniLM-L6-v2, no
#: adjacency edges, on the same 100 musique_train questions and 1,890 passages.
EXTERNAL_RECALL = {
    "musique_train": (
        ("LinearRAG, its MuSiQue settings", {1: 31.3, 2: 50.5, 5: 66.8, 10: 76.7, 20: 84.0}),
        ("LinearRAG, its default settings", {1: 33.5, 2: 48.8, 5: 67.5, 10: 76.5, 20: 82.7}),
    ),
}
EXTERNAL_NOTE = ("measured elsewhere with LinearRAG's public code (spaCy `en_core_web_sm`, all-MiniLM-L6-v2, "
                 "no adjacency edges), not by this command")
