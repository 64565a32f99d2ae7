"""Extractor results files shared by processes: saves merge what another process saved."""
from __future__ import annotations

from helpers import CORPUS, make_rag

from hippo_engine.index.openie import OpenIEResult, load_openie_file, save_openie_file
from hippo_engine.index.results_file import ResultsFile


def _file(path):
    return ResultsFile(path, load_openie_file, save_openie_file, "OpenIE results file")


def _result(i: int) -> OpenIEResult:
    from hippo_engine.ids import chunk_id
    p = f"Passage {i}\ntext {i}"
    return OpenIEResult(chunk_id(p), p, [f"E{i}"], [(f"E{i}", "is", f"F{i}")])


def test_two_writers_keep_each_others_results(tmp_path):
    path = tmp_path / "openie.json"
    a, b = _file(path), _file(path)          # two processes, each with its own view
    assert a.results == {} and b.results == {}
    ra, rb = _result(1), _result(2)
    a.results[ra.idx] = ra
    a.save()
    b.results[rb.idx] = rb
    b.save()                                 # b read nothing before: it merges a's result first
    assert set(load_openie_file(path)) == {ra.idx, rb.idx}
    assert a.refresh() == 1 and set(a.results) == {ra.idx, rb.idx}
    assert a.refresh() == 0                  # unchanged file: nothing read


def test_two_memories_extracting_into_one_folder_lose_no_openie_result(tmp_path):
    one, two = make_rag(tmp_path / "idx"), make_rag(tmp_path / "idx")
    _ = one.extractor.results, two.extractor.results     # both read the (missing) file first
    one.index(CORPUS[:3])
    two.index(CORPUS[3:6])
    saved = load_openie_file(one.openie_path)
    assert len(saved) == 6
    calls = two.llm.calls
    two.index(CORPUS[:3])                    # extracted by the other one: no LLM call
    assert two.llm.calls == calls
