"""The citation parser: formats it reads, what it drops and counts, and that no text makes it raise."""
from hypothesis import given, settings
from hypothesis import strategies as st

from hippo_engine.ids import chunk_id
from hippo_engine.qa.citations import Citations, parse_citations, strip_citations

IDS = [chunk_id(f"T{i}\ntext {i}") for i in range(5)]


def test_formats():
    assert parse_citations("Bo built it [1]. Answer: Cetra [2]", IDS) == Citations(IDS[:2], 0)
    assert parse_citations("see [1, 3] and [3]", IDS).ids == [IDS[0], IDS[2]]
    assert parse_citations("[2][4]", IDS).ids == [IDS[1], IDS[3]]
    assert parse_citations("passages [2-4]", IDS).ids == IDS[1:4]
    assert parse_citations("as (2) says", IDS).ids == [IDS[1]]
    assert parse_citations("Passage 5 and passage #1", IDS).ids == [IDS[4], IDS[0]]
    assert parse_citations("[Passage 3]", IDS).ids == [IDS[2]]
    assert parse_citations(f"from {IDS[3]}", IDS).ids == [IDS[3]]


def test_invalid_references_are_dropped_and_counted():
    got = parse_citations(f"[0] [6] [2] [1-1000] {chunk_id('not shown')}", IDS)
    assert got.ids == [IDS[1]] and got.invalid == 4
    assert parse_citations("built (1871) in 1871 [7]", IDS) == Citations([], 1)   # a year is not a citation
    assert parse_citations("Answer: Kessingford", IDS) == Citations()
    assert parse_citations("[1]", []) == Citations([], 1)


def test_non_text_gives_nothing():
    for bad in (None, 3, b"[1]", ["[1]"], ""):
        assert parse_citations(bad, IDS) == Citations()


def test_strip_citations():
    assert strip_citations("Cetra [2].") == "Cetra."
    assert strip_citations("The mill [1] was built [1, 3] in 1871") == "The mill was built in 1871"


_PIECES = st.sampled_from(["[", "]", "(", ")", ",", "-", "–", " and ", "passage", "Passage #", "chunk-",
                           "Answer:", "\n", " ", "0", "1", "2", "9", "99999999999999999999", "[1-3]",
                           "[2, 5]", "(4)", IDS[0], IDS[0][:-1], "<think>", "</think>", "[]", "[-]"])
MODEL_TEXT = st.one_of(st.text(max_size=300), st.lists(_PIECES | st.text(max_size=5), max_size=60).map("".join))


@settings(max_examples=500, deadline=None)
@given(MODEL_TEXT, st.integers(min_value=0, max_value=5))
def test_never_raises_and_returns_only_shown_ids(text, n):
    shown = IDS[:n]
    got = parse_citations(text, shown)
    assert set(got.ids) <= set(shown) and len(got.ids) == len(set(got.ids))
    assert got.invalid >= 0
    assert isinstance(strip_citations(text), str)
