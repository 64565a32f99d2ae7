"""Graph construction: effective weights, kinds, and the incremental insert being bit-identical
to a rebuild from scratch."""
import random

import numpy as np
import pytest

from hippo_engine.ids import entity_id
from hippo_engine.index.graph import (
    CONTEXT_WEIGHT,
    FACT_WEIGHT,
    KIND_CONTEXT,
    KIND_FACT,
    KIND_SYNONYMY,
    GraphData,
    build_graph,
    insert_passages,
)


def eid(phrase):
    return entity_id(phrase)


def same_graph(a: GraphData, b: GraphData):
    assert list(a.node_ids) == list(b.node_ids)
    assert a.num_entities == b.num_entities
    for f in ("src", "dst", "weight", "kinds"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    for f in ("base", "syn_lo", "syn_hi", "syn_dirs"):
        assert np.array_equal(getattr(a.parts, f), getattr(b.parts, f)), f


def test_weights_and_kinds():
    triples = {"chunk-1": [("a", "r", "b"), ("a", "r2", "b"), ("b", "r", "b")],
               "chunk-2": [("b", "r", "c")], "chunk-3": []}
    syn = {eid("a"): {eid("c"): 0.9}, eid("c"): {eid("a"): 0.85}, eid("b"): {eid("c"): 0.81}}
    g = build_graph(["chunk-2", "chunk-1", "chunk-3"], triples, syn)
    e = g.edge_dict()
    key = lambda x, y: tuple(sorted((x, y)))  # noqa: E731
    assert e[key(eid("a"), eid("b"))] == 2 * FACT_WEIGHT          # two triples; the self-loop b-b dropped
    assert e[key(eid("b"), eid("c"))] == FACT_WEIGHT + 0.81       # fact + one synonymy direction
    assert e[key(eid("a"), eid("c"))] == 0.9 + 0.85               # both directions
    assert e[key("chunk-1", eid("a"))] == CONTEXT_WEIGHT
    assert (eid("b"), eid("b")) not in e
    st = g.stats()
    assert st["passage_nodes"] == 3 and st["entity_nodes"] == 3
    assert st["fact_edges"] == 2 and st["synonymy_edges"] == 2 and st["context_edges"] == 4
    i = g.index_of
    kinds = {key(g.node_ids[s], g.node_ids[d]): k for s, d, k in zip(g.src, g.dst, g.kinds, strict=False)}
    assert kinds[key(eid("b"), eid("c"))] == KIND_FACT | KIND_SYNONYMY
    assert kinds[key("chunk-2", eid("c"))] == KIND_CONTEXT
    assert np.all(g.src < g.dst) and np.all(np.diff(g.src * g.num_nodes + g.dst) > 0)
    assert list(g.node_index(["chunk-3", "chunk-9"], entities=False)) == [i["chunk-3"], -1]


def random_content(seed, n_pass=40, n_ent=50):
    rng = random.Random(seed)
    ents = [f"e{i}" for i in range(n_ent)]
    pids = [f"chunk-{rng.random():.12f}" for _ in range(n_pass)]
    triples = {p: [(rng.choice(ents), "r", rng.choice(ents)) for _ in range(rng.randint(0, 6))] for p in pids}
    return rng, pids, triples


def random_synonymy(rng, pids, triples, cap=3):
    ents = sorted({eid(x) for p in pids for t in triples[p] for x in (t[0], t[2])})
    out = {}
    for s in ents:
        nb = {t: round(rng.uniform(0.8, 1.0), 6) for t in rng.sample(ents, min(cap, len(ents))) if t != s}
        if nb:
            out[s] = nb
    return out


@pytest.mark.parametrize("seed", range(6))
def test_insert_is_bit_identical_to_rebuild(seed):
    rng, pids, triples = random_content(seed)
    cut1, cut2 = sorted(rng.sample(range(1, len(pids)), 2))
    parts = [pids[:cut1], pids[cut1:cut2], pids[cut2:]]
    have: list = []
    syn_old: dict = {}
    g = build_graph([], triples, {})
    for chunk in parts:
        have = have + chunk
        syn_new = random_synonymy(rng, have, triples)
        changes = {s: (syn_old.get(s), syn_new.get(s)) for s in set(syn_old) | set(syn_new)
                   if syn_old.get(s) != syn_new.get(s)}
        g = insert_passages(g, chunk, triples, changes)
        same_graph(g, build_graph(have, triples, syn_new))
        syn_old = syn_new


def test_insert_rejects_known_passages():
    _, pids, triples = random_content(1)
    g = build_graph(pids[:5], triples, {})
    with pytest.raises(ValueError):
        insert_passages(g, pids[3:7], triples, {})


def test_save_load_roundtrip(tmp_path):
    rng, pids, triples = random_content(2)
    g = build_graph(pids, triples, random_synonymy(rng, pids, triples))
    g.save(tmp_path / "g.npz", "7")
    assert GraphData.load(tmp_path / "g.npz", "8") is None
    same_graph(GraphData.load(tmp_path / "g.npz", "7"), g)
    # a file without edge parts (older format) loads, without parts
    np.savez(tmp_path / "old.npz", node_ids=np.array(g.node_ids, dtype=str), num_entities=g.num_entities,
             src=g.src, dst=g.dst, weight=g.weight, kinds=g.kinds, version=np.array("7"))
    old = GraphData.load(tmp_path / "old.npz", "7")
    assert old.parts is None and np.array_equal(old.weight, g.weight)
    with pytest.raises(ValueError):
        insert_passages(old, ["chunk-new"], {}, {})


def test_damaged_or_foreign_graph_files_are_rebuilt(tmp_path):
    import shutil

    import numpy as np
    from helpers import CORPUS, make_rag

    rag = make_rag(tmp_path / "a")
    rag.index(CORPUS)
    want = rag.graph_stats()
    path = tmp_path / "a" / "graph.npz"
    rag.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])                       # truncated: BadZipFile
    assert make_rag(tmp_path / "a").graph_stats() == want
    other = make_rag(tmp_path / "b")                               # same version number, other content
    other.index(CORPUS[:3])
    assert other.index_state.version == make_rag(tmp_path / "a").index_state.version
    other.close()
    shutil.copy(tmp_path / "b" / "graph.npz", path)
    assert make_rag(tmp_path / "a").graph_stats() == want
    with np.load(path) as z:                                       # NaN weights
        arrays = {k: z[k] for k in z.files}
    arrays["weight"] = arrays["weight"].copy()
    arrays["weight"][0] = np.nan
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    assert make_rag(tmp_path / "a").graph_stats() == want
