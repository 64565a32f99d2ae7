"""The citations benchmark's parts: the scripted server's replies read back as citations of shown
passages, the scores and the bootstrap (no models, a real HTTP server on 127.0.0.1)."""
from hippo_engine.datatypes import QuerySolution
from hippo_engine.ids import chunk_id
from reproduce.citations_bench import _server_reader, bootstrap, read, score
from reproduce.citations_server import FORMATS, ScriptedReaderServer, citation_format

DOCS = ["Velor\nVelor is a town in Kaldavia.", "Ilse Marrow\nIlse Marrow was born in Velor.", "Brask\nBrask is a city."]


def test_scripted_server_cites_and_scores():
    q = "Where was Ilse Marrow born?"
    sols = [QuerySolution(q, list(DOCS), [3.0, 2.0, 1.0], passage_ids=[chunk_id(d) for d in DOCS])]
    with ScriptedReaderServer({q: ["Velor"]}) as srv:
        llm = _server_reader(srv.base_url)
        for fmt in range(FORMATS):                 # every citation format the script has
            srv.fmt = fmt
            cited, _ = read(llm, sols, "cite")
            assert cited[0].answer == "Velor" and cited[0].citations[0] == chunk_id(DOCS[0])
            assert cited[0].invalid_citations == 1
        plain, _ = read(llm, sols, "plain")
        before, _ = read(llm, sols, "before")
    assert plain[0].answer == "Velor" and plain[0].citations == [] and plain[0].invalid_citations == 0
    assert before[0].answer == "Velor"
    s = score(cited, [[DOCS[1]]], [["Velor"]])
    assert s["with_citation"] == 1.0 and 0 <= s["gold_share"] <= 1 and s["leaks"] == 0 and s["f1"] == [1.0]


def test_bootstrap_interval_holds_the_mean():
    lo, hi = bootstrap([0.0, 0.5, -0.5, 0.25] * 5)
    assert lo <= 0.0625 <= hi and bootstrap([0.0] * 20) == (0.0, 0.0)


def _replies(questions, order):
    """Each question's answer and citations as read back, questions sent in ``order``."""
    sols = {q: QuerySolution(q, list(DOCS), [3.0, 2.0, 1.0], passage_ids=[chunk_id(d) for d in DOCS])
            for q in questions}
    out = {}
    with ScriptedReaderServer({q: ["Velor"] for q in questions}) as srv:
        llm = _server_reader(srv.base_url)
        for q in order:
            cited, _ = read(llm, [sols[q]], "cite")
            out[q] = (cited[0].answer, cited[0].citations, cited[0].invalid_citations)
    return out


def test_scripted_server_format_follows_the_question_not_the_arrival_order():
    questions = [f"Where was Ilse Marrow born ({i})?" for i in range(12)]
    assert len({citation_format(q) for q in questions}) > 1
    assert citation_format(questions[0]) == citation_format(str(questions[0]))    # stable, no salt
    forward = _replies(questions, questions)
    backward = _replies(questions, questions[::-1])
    assert forward == backward
    again = _replies(questions, questions[3:] + questions[:3])
    assert again == forward
