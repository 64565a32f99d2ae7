"""The paper's figures (reproduce/tables/paper.py)."""
from reproduce.tables.paper import paper_column


def test_paper_column():
    assert paper_column("musique") == "MuSiQue" and paper_column("musique_train") == "MuSiQue"
    assert paper_column("2wikimultihopqa") == "2Wiki" and paper_column("hotpotqa") == "HotpotQA"
    assert paper_column("nq_rear") == "NQ" and paper_column("popqa") == "PopQA"
    assert paper_column("lveval") is None and paper_column("narrativeqa_dev_10_doc") is None
