"""The OpenIE results file is read only when an index() call needs extraction results: a damaged
one does not stop opening the index for graph_stats, retrieve or delete, and the error names it."""
import pytest
from helpers import CORPUS, make_rag

DAMAGE = {
    "binary garbage": b"\xff\xfe\x00\x81garbage\xc3\x28" * 40,
    "truncated JSON": b'{"docs": [{"idx": "chunk-1", "passage": "Lake',
    "not an OpenIE file": b'{"something": "else"}',
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_openie_file_blocks_only_extraction(tmp_path, damage):
    rag = make_rag(tmp_path / "idx")
    rag.index(CORPUS[:6])
    want = rag.graph_stats()
    path = rag.openie_path
    rag.close()
    path.write_bytes(DAMAGE[damage])
    rag = make_rag(tmp_path / "idx")                           # opening does not read the file
    assert rag.graph_stats() == want
    assert len(rag.retrieve(["Who mapped Lake Veloria?"])[0].docs) == 6
    assert rag.index(CORPUS[:3]) == {"added": 0}               # nothing to extract: no need of the file
    assert rag.delete(CORPUS[5:6])["removed"] == 1
    with pytest.raises(ValueError) as e:                      # extraction needs it: the error names it
        rag.index(CORPUS[6:])
    assert str(path) in str(e.value)
    assert rag.graph_stats()["passage_nodes"] == 5             # and nothing was half-written
    path.unlink()                                              # deleting the file only costs the LLM work
    assert rag.index(CORPUS[6:])["added"] == 2
