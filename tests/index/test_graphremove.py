"""Removing passages from a graph in place of a rebuild (``index/graphremove.py``): bit for bit
the graph ``build_graph`` gives for what remains, with triples, hyperedge weights and synonymy
changes; and refusals the graph keeper turns into a rebuild."""
import random

import numpy as np
import pytest

from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import entity_id
from hippo_engine.index.facts import graph_input
from hippo_engine.index.graph import build_graph, insert_passages
from hippo_engine.index.graphremove import remove_passages


def same_graph(a, b):
    assert list(a.node_ids) == list(b.node_ids)
    assert a.num_entities == b.num_entities
    for f in ("src", "dst", "weight", "kinds"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    for f in ("base", "syn_lo", "syn_hi", "syn_dirs"):
        assert np.array_equal(getattr(a.parts, f), getattr(b.parts, f)), f


def content(seed, hyper: bool, n_pass=40, n_ent=30):
    """Passages with triples (or hyperedges, as the graph sees them) over a shared set of phrases."""
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
    """Random synonymy lists over the entities of ``pids``."""
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


@pytest.mark.parametrize("hyper", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_removal_is_bit_identical_to_rebuild(seed, hyper):
    rng, pids, triples, weights = content(seed, hyper)
    syn_all = lists(rng, pids, triples)
    g = build_graph(pids, triples, syn_all, weights)
    have = list(pids)
    for _ in range(3):
        gone = rng.sample(have, max(1, len(have) // 4))
        keep = [p for p in have if p not in gone]
        syn_new = lists(rng, keep, triples)
        g = remove_passages(g, gone, {p: triples[p] for p in gone}, changes(syn_all, syn_new),
                            {p: weights[p] for p in gone if p in weights}, dead(have, keep, triples))
        same_graph(g, build_graph(keep, triples, syn_new, weights))
        have, syn_all = keep, syn_new


def test_an_insert_then_a_removal_in_one_change_equals_a_rebuild():
    rng, pids, triples, _ = content(7, False)
    old, new = pids[:25], pids[25:]
    syn0 = lists(rng, old, triples)
    g = build_graph(old, triples, syn0)
    syn1 = lists(rng, old + new, triples)
    g = insert_passages(g, new, triples, changes(syn0, syn1))
    gone = old[:10]
    keep = old[10:] + new
    syn2 = lists(rng, keep, triples)
    g = remove_passages(g, gone, triples, changes(syn1, syn2))
    same_graph(g, build_graph(keep, triples, syn2))


def test_removing_every_passage_leaves_an_empty_graph():
    rng, pids, triples, _ = content(3, False)
    syn = lists(rng, pids, triples)
    g = remove_passages(build_graph(pids, triples, syn), pids, triples, changes(syn, {}))
    same_graph(g, build_graph([], triples, {}))
    assert g.num_nodes == 0


def test_what_the_graph_does_not_hold_is_refused():
    rng, pids, triples, _ = content(4, False)
    g = build_graph(pids[:20], triples, {})
    with pytest.raises(ValueError, match="not in the graph"):
        remove_passages(g, pids[19:21], triples, {})          # pids[20] was never added
    busy = next(p for p in pids[:20] if triples[p])
    with pytest.raises(ValueError, match="entities left without an edge"):
        remove_passages(g, [busy], triples, {}, dead_entities=["entity-not-this-one"])
    wrong = {busy: [(triples[busy][0][0], "r", "a phrase the graph never saw")]}
    with pytest.raises(ValueError, match="not in the graph"):
        remove_passages(g, [busy], wrong, {})
    assert g.parts is not None
    with pytest.raises(ValueError, match="edge parts"):
        remove_passages(g.__class__(g.node_ids, g.num_entities, g.src, g.dst, g.weight, g.kinds), [busy], triples, {})
