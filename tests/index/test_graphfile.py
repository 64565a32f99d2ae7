"""graph.npz is verified, not trusted: a damaged, malformed or foreign file is rebuilt from the index."""
import logging
import shutil
import sqlite3
import zipfile

import numpy as np
import pytest
from helpers import CORPUS, make_rag

from hippo_engine.index.digest import META_KEY, content_digest
from hippo_engine.index.graph import GraphData


def _index(path, docs):
    rag = make_rag(path)
    rag.index(docs)
    stats, version = rag.graph_stats(), rag.index_state.version
    rag.close()
    return stats, version


def _rewrite(path, change):
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    change(arrays)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _stored_digest(save_dir):
    con = sqlite3.connect(save_dir / "index.sqlite")
    try:
        return con.execute("SELECT value FROM meta WHERE key=?", (META_KEY,)).fetchone()
    finally:
        con.close()


def test_graph_copied_from_an_index_with_the_same_version_and_size_is_rebuilt(tmp_path, caplog):
    want, version_a = _index(tmp_path / "a", CORPUS[:4])
    other, version_b = _index(tmp_path / "b", CORPUS[4:])
    assert version_a == version_b and other["passage_nodes"] == want["passage_nodes"] and other != want
    path = tmp_path / "a" / "graph.npz"
    shutil.copy(tmp_path / "b" / "graph.npz", path)
    with caplog.at_level(logging.WARNING):
        rag = make_rag(tmp_path / "a")
        assert rag.graph_stats() == want
    assert any(str(path) in r.getMessage() and "other content" in r.getMessage() for r in caplog.records)
    rag.retrieve(["Who mapped Lake Veloria?"])                   # no KeyError from foreign node ids
    clean = make_rag(tmp_path / "clean")
    clean.index(CORPUS[:4])
    assert rag.graph.edge_dict() == clean.graph.edge_dict()
    rag.close()
    # the rebuilt file was saved: the next open takes it as it is
    with caplog.at_level(logging.INFO):
        caplog.clear()
        assert make_rag(tmp_path / "a").graph_stats() == want
    assert not any("rebuilding" in r.getMessage() for r in caplog.records)


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _nan_weight(a):
    a["weight"] = a["weight"].copy()
    a["weight"][0] = np.nan


def _edge_out_of_range(a):
    a["dst"] = a["dst"].copy()
    a["dst"][-1] = len(a["node_ids"]) + 5


def _edges_reversed(a):
    a["src"], a["dst"] = a["dst"], a["src"]


def _parts_disagree(a):
    a["base"] = a["base"] + 1.0


def _short_kinds(a):
    a["kinds"] = a["kinds"][:-1]


def _pickled_ids(a):
    a["node_ids"] = a["node_ids"].astype(object)                  # saved pickled: refused, never unpickled


DAMAGE = {
    "truncated zip": _truncate,
    "garbage bytes": lambda p: p.write_bytes(b"\x00\xff garbage " * 50),
    "empty file": lambda p: p.write_bytes(b""),
    "bad CRC": None,
    "NaN weight": _nan_weight,
    "edge out of range": _edge_out_of_range,
    "edges reversed": _edges_reversed,
    "edge parts disagree": _parts_disagree,
    "short kinds array": _short_kinds,
    "missing array": lambda a: a.pop("weight"),
    "pickled node ids": _pickled_ids,
}


def _flip_a_data_byte(path):
    """Change one byte inside the stored weights: only the zip CRC can tell."""
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("weight.npy")
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.file_size - 3] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_or_malformed_graph_files_are_rebuilt(tmp_path, caplog, damage):
    want, _ = _index(tmp_path / "a", CORPUS)
    path = tmp_path / "a" / "graph.npz"
    fn = DAMAGE[damage]
    if damage == "bad CRC":
        _flip_a_data_byte(path)
    elif fn in (_truncate,) or damage in ("garbage bytes", "empty file"):
        fn(path)
    else:
        _rewrite(path, fn)
    with caplog.at_level(logging.WARNING):
        rag = make_rag(tmp_path / "a")
        assert rag.graph_stats() == want
    assert any(str(path) in r.getMessage() and "rebuilding" in r.getMessage() for r in caplog.records)
    digest = rag.index_state._digest
    on_disk = GraphData.load(path, rag.index_state.version, digest).stats()
    assert {**on_disk, "extractor": "openie"} == want                              # sound again on disk
    rag.index(["Kaldavia\nKaldavia is a country. Brask is the capital of Kaldavia."])   # and usable for inserts


def test_content_checksum_is_kept_in_step_and_history_free(tmp_path):
    rag = make_rag(tmp_path / "inc")
    rag.index(CORPUS[:3])
    rag.index(CORPUS[3:])
    rag.delete(CORPUS[1:3])
    ix = rag.index_state
    scratch = content_digest(ix._passage_ids(), ix.passage_triples, ix.passage_hyperedges, ix.synonymy)
    assert _stored_digest(tmp_path / "inc") == (scratch,) and ix._digest == scratch
    clean = make_rag(tmp_path / "clean")
    clean.index(CORPUS[:1] + CORPUS[3:])
    assert clean.index_state._digest == scratch
    rag.delete(CORPUS)
    assert rag.index_state._digest == content_digest([], {}, {}, {}) == "0" * 32


def test_an_index_without_a_checksum_gets_one_and_its_graph_rebuilt_once(tmp_path):
    want, _ = _index(tmp_path / "a", CORPUS)
    expected = _stored_digest(tmp_path / "a")
    con = sqlite3.connect(tmp_path / "a" / "index.sqlite")
    con.execute("DELETE FROM meta WHERE key=?", (META_KEY,))
    con.commit()
    con.close()
    _rewrite(tmp_path / "a" / "graph.npz", lambda a: a.pop("content_digest"))   # an older graph file
    rag = make_rag(tmp_path / "a")
    assert rag.graph_stats() == want
    assert _stored_digest(tmp_path / "a") == expected


def test_a_stale_reader_does_not_overwrite_a_newer_graph_file(tmp_path):
    writer = make_rag(tmp_path / "x")
    writer.index(CORPUS[:4])
    reader = make_rag(tmp_path / "x")                              # holds version 1 in memory
    writer.index(CORPUS[4:])
    path = tmp_path / "x" / "graph.npz"
    before = path.read_bytes()
    assert reader.index_state.graph.num_nodes                      # no refresh: built from its version 1
    assert path.read_bytes() == before                             # ... and not saved under version 2's label
    assert reader.index_state.refresh()
    assert reader.graph_stats()["passage_nodes"] == 8
    assert GraphData.load(path, writer.index_state.version, writer.index_state._digest) is not None


def test_node_ids_are_stored_as_bytes_and_weight_parts_can_be_left_out(tmp_path):
    rag = make_rag(tmp_path / "g")
    rag.index(CORPUS)
    st = rag.index_state
    g = st.graph
    with np.load(st.graph_path) as z:
        assert z["node_ids"].dtype.kind == "S"                  # one byte a character on disk
    full = GraphData.load(st.graph_path, st.version, st._digest)
    lean = GraphData.load(st.graph_path, st.version, st._digest, parts=False)
    assert full.parts is not None and lean.parts is None
    for x in (full, lean):
        assert list(x.node_ids) == list(g.node_ids) and all(type(i) is str for i in x.node_ids)
        assert x.edge_dict() == g.edge_dict()
    odd = GraphData(np.array(["entity-é", "chunk-1"], dtype=object), 1, np.array([0]), np.array([1]),
                    np.array([1.0]), np.array([2], np.uint8))
    odd.save(tmp_path / "odd.npz", "1")                          # non-ASCII ids are kept as str
    assert list(GraphData.load(tmp_path / "odd.npz", "1").node_ids) == ["entity-é", "chunk-1"]
