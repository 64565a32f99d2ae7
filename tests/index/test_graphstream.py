"""``graph.npz`` updated by streaming (``index/graphstream.py``): the file after an insert, a removal
or both equals the graph the in-memory functions give (so ``build_graph``'s), whatever the chunk
sizes; a file that cannot take the change is refused and left as it was."""
import random

import numpy as np
import pytest

import hippo_engine.index.graphstream as gs
from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import entity_id
from hippo_engine.index.facts import graph_input
from hippo_engine.index.graph import GraphData, build_graph
from hippo_engine.index.graphstream import GraphFileError, update_graph_file


def same_graph(a, b):
    assert list(a.node_ids) == list(b.node_ids)
    assert a.num_entities == b.num_entities
    for f in ("src", "dst", "weight", "kinds"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    for f in ("base", "syn_lo", "syn_hi", "syn_dirs"):
        assert np.array_equal(getattr(a.parts, f), getattr(b.parts, f)), f


def content(seed, hyper=False, n_pass=60, n_ent=40):
    rng = random.Random(seed)
    phrases = [f"e{i}" for i in range(n_ent)]
    pids = sorted({f"chunk-{rng.random():.12f}" for _ in range(n_pass)})
    if not hyper:
        return rng, pids, {p: [(rng.choice(phrases), "r", rng.choice(phrases)) for _ in range(rng.randint(0, 5))]
                           for p in pids}, {}
    edges = {p: [Hyperedge(f"s{p}{j}", tuple(rng.sample(phrases, rng.randint(1, 4)))) for j in range(rng.randint(0, 3))]
             for p in pids}
    triples, weights = graph_input({}, edges)
    return rng, pids, {p: triples.get(p, []) for p in pids}, weights


def lists(rng, pids, triples, cap=3):
    ents = sorted({entity_id(x) for p in pids for t in triples[p] for x in (t[0], t[2])})
    out = {}
    for s in ents:
        nb = {t: round(rng.uniform(0.8, 1.0), 6) for t in rng.sample(ents, min(cap, len(ents))) if t != s}
        if nb:
            out[s] = nb
    return out


def changes(old, new):
    return {s: (old.get(s), new.get(s)) for s in set(old) | set(new) if old.get(s) != new.get(s)}


def dead(pids, keep, triples):
    live = {entity_id(x) for p in keep for t in triples[p] for x in (t[0], t[2])}
    return sorted({entity_id(x) for p in pids for t in triples[p] for x in (t[0], t[2])} - live)


@pytest.fixture(params=[(1 << 18, 1 << 16), (7, 5), (2, 1)], ids=["big", "small", "tiny"])
def chunks(request, monkeypatch):
    monkeypatch.setattr(gs, "CHUNK_EDGES", request.param[0])
    monkeypatch.setattr(gs, "CHUNK_NODES", request.param[1])


@pytest.mark.parametrize("hyper", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_inserts_removals_and_both_equal_a_rebuild(tmp_path, chunks, seed, hyper):
    rng, pids, triples, weights = content(seed, hyper)
    path = tmp_path / "graph.npz"
    have = pids[:20]
    syn = lists(rng, have, triples)
    build_graph(have, triples, syn, weights).save(path, "1", "d1")
    labels, version = ("1", "d1"), 1
    rest = pids[20:]
    while rest or len(have) > 5:
        add, rest = rest[:rng.randint(0, 12)], rest
        rest = rest[len(add):]
        gone = rng.sample(have, rng.randint(0, max(0, len(have) // 3)))
        mid = have + add
        syn_mid = lists(rng, mid, triples) if add else syn
        keep = [p for p in mid if p not in gone]
        syn_new = lists(rng, keep, triples) if gone else syn_mid
        if not add and not gone:
            break
        version += 1
        new_labels = (str(version), f"d{version}")
        update_graph_file(path, labels, new_labels,
                          added=(add, {p: triples[p] for p in add}, changes(syn, syn_mid),
                                 {p: weights[p] for p in add if p in weights}) if add else None,
                          removed=(gone, {p: triples[p] for p in gone}, changes(syn_mid, syn_new),
                                   {p: weights[p] for p in gone if p in weights}, dead(mid, keep, triples))
                          if gone else None)
        got = GraphData.load(path, *new_labels)
        assert got is not None
        same_graph(got, build_graph(keep, triples, syn_new, weights))
        have, syn, labels = keep, syn_new, new_labels


def test_a_file_that_cannot_take_the_change_is_refused_and_kept(tmp_path):
    rng, pids, triples, _ = content(5)
    path = tmp_path / "graph.npz"
    build_graph(pids[:10], triples, {}).save(path, "3", "abc")
    before = path.read_bytes()
    add = (pids[10:12], triples, {}, None)
    with pytest.raises(GraphFileError, match="version 3"):
        update_graph_file(path, ("2", "abc"), ("4", "x"), added=add)
    with pytest.raises(GraphFileError, match="already in the graph"):
        update_graph_file(path, ("3", "abc"), ("4", "x"), added=(pids[9:11], triples, {}, None))
    busy = next(p for p in pids[:10] if triples[p])
    with pytest.raises(GraphFileError, match="left"):
        update_graph_file(path, ("3", "abc"), ("4", "x"), removed=([busy], triples, {}, None, []))
    with pytest.raises(GraphFileError, match="does not hold"):
        update_graph_file(path, ("3", "abc"), ("4", "x"), removed=([pids[11]], triples, {}, None, []))
    assert path.read_bytes() == before
    damaged = bytearray(before)
    damaged[len(damaged) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(GraphFileError, match="damaged"):           # a CRC that does not match
        update_graph_file(path, ("3", "abc"), ("4", "x"), added=add)
    assert path.read_bytes() == bytes(damaged)
    with pytest.raises(GraphFileError, match="does not exist"):
        update_graph_file(tmp_path / "none.npz", ("3", "abc"), ("4", "x"), added=add)
