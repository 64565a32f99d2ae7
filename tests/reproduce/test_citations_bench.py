"""The citations benchmark's parts: the scripted server's replies read back as citations of shown
passages, the scores and the bootstrap (no models, a real HTTP server on 127.0.0.1)."""
from hippo_engine.datatypes import QuerySolution
from hippo_engine.ids import chunk_id
from reproduce.citations_bench import _server_reader, bootstrap, read, score
from reproduce.citations_server import ScriptedReaderServer

DOCS = ["Velor\nVelor is a town in Kaldavia.", "Ilse Marrow\nIlse Marrow was born in Velor.", "Brask\nBrask is a city."]


def test_scripted_server_cites_and_scores():
    q = "Where was Ilse Marrow born?"
    sols = [QuerySolution(q, list(DOCS), [3.0, 2.0, 1.0], passage_ids=[chunk_id(d) for d in DOCS])]
    with ScriptedReaderServer({q: ["Velor"]}) as srv:
        llm = _server_reader(srv.base_url)
        for turn in range(5):                      # every citation format the script rotates through
            srv.turns = turn
            cited, _ = read(llm, sols, "cite")
            assert cited[0].answer == "Velor" and cited[0].citations[0] == chunk_id(DOCS[0])
            assert cited[0].invalid_citations == 1
        plain, _ = read(llm, sols, "plain")
    assert plain[0].answer == "Velor" and plain[0].citations == []
    s = score(cited, [[DOCS[1]]], [["Velor"]])
    assert s["with_citation"] == 1.0 and 0 <= s["gold_share"] <= 1 and s["leaks"] == 0 and s["f1"] == [1.0]


def test_bootstrap_interval_holds_the_mean():
    lo, hi = bootstrap([0.0, 0.5, -0.5, 0.25] * 5)
    assert lo <= 0.0625 <= hi and bootstrap([0.0] * 20) == (0.0, 0.0)
