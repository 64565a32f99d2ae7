"""Second-hop strategies (retrieve/second_hop.py) and their index (retrieve/hop_index.py) on a small
hand-built hyperedge graph: "Green" is an album by Steve Hillage, whose page names his wife."""
import numpy as np
import pytest

from hippo_engine.datatypes import Hyperedge as H
from hippo_engine.ids import entity_id, hyperedge_id
from hippo_engine.index.facts import graph_input
from hippo_engine.index.graph import build_graph
from hippo_engine.retrieve.hop_index import HopIndex
from hippo_engine.retrieve.ppr import PPRKernel
from hippo_engine.retrieve.second_hop import (
    STRATEGIES,
    BridgeHop,
    HopContext,
    RequeryHop,
    ReseedHop,
    keep_head,
)

PASSAGES = {
    "p-album": [H("Green is an album by Steve Hillage.", ("green", "steve hillage"))],
    "p-hillage": [H("Steve Hillage married Miquette Giraudy.", ("steve hillage", "miquette giraudy")),
                  H("He played guitar in Gong.", ("gong",))],
    "p-colour": [H("Green is a colour between blue and yellow.", ("green", "blue", "yellow"))],
    "p-leaf": [H("Leaves are green in spring.", ("green", "spring"))],
    "p-giraudy": [H("Miquette Giraudy plays keyboards.", ("miquette giraudy",))],
    "p-other": [H("Zed Orr paints boats.", ("zed orr",))],
}
DIM = 16


def _unit(v):
    return (v / np.linalg.norm(v)).astype(np.float32)


@pytest.fixture()
def world():
    pids = sorted(PASSAGES)
    triples, weights = graph_input({}, PASSAGES)
    graph = build_graph(pids, triples, {}, weights)
    fids = sorted({hyperedge_id(h) for hs in PASSAGES.values() for h in hs})
    text = {hyperedge_id(h): h.text for hs in PASSAGES.values() for h in hs}
    rng = np.random.default_rng(0)
    base = {t: _unit(rng.standard_normal(DIM)) for t in text.values()}
    q = _unit(base["Green is an album by Steve Hillage."] + 0.6 * base["Steve Hillage married Miquette Giraudy."])
    fact_mat = np.stack([base[text[f]] for f in fids])
    passage_mat = np.stack([_unit(sum(base[h.text] for h in PASSAGES[p])) for p in pids])
    passage_nodes = graph.node_index(pids, entities=False)
    hop = HopIndex.build(PASSAGES, fids, pids, graph, passage_nodes)
    kernel = PPRKernel.from_graph(graph, "float64")
    ctx_counts = np.zeros(graph.num_nodes)
    for p in pids:
        for e in {e for h in PASSAGES[p] for e in h.entities}:
            ctx_counts[graph.node_index([entity_id(e)], entities=True)[0]] += 1

    def run_ppr(R):
        return kernel.run(R, 0.5, 1e-10, 500)[passage_nodes]

    ctx = HopContext(hop, fact_mat, graph.num_entities, ctx_counts, 0.05, run_ppr, passage_mat)
    green = graph.node_index([entity_id("green")], entities=True)[0]
    R = np.zeros((graph.num_nodes, 1))
    R[green, 0] = 1.0 / ctx_counts[green]
    dense = (passage_mat @ q).astype(np.float64)[:, None]
    R[passage_nodes, 0] += 0.05 * (dense[:, 0] - dense.min()) / (dense.max() - dense.min())
    return {"pids": pids, "graph": graph, "fids": fids, "hop": hop, "ctx": ctx, "R": R, "q": q[None, :],
            "dense": dense, "first": run_ppr(R)}


def rank_of(world, scores, pid):
    order = np.lexsort((np.arange(len(scores)), -scores))
    return int(np.flatnonzero(order == world["pids"].index(pid))[0])


def test_hop_index_rows(world):
    hop, pids, fids, g = world["hop"], world["pids"], world["fids"], world["graph"]
    row = fids.index(hyperedge_id(PASSAGES["p-hillage"][0]))
    assert hop.fact_passages[row].indices.tolist() == [pids.index("p-hillage")]
    names = {g.node_ids[n] for n in hop.fact_nodes[row].indices}
    assert names == {entity_id("steve hillage"), entity_id("miquette giraudy")}
    assert sorted(hop.passage_facts[pids.index("p-hillage")].indices.tolist()) == sorted(
        fids.index(hyperedge_id(h)) for h in PASSAGES["p-hillage"])
    assert g.node_ids[hop.topic[pids.index("p-hillage")]] == entity_id("steve hillage")   # first of a tie
    fi, tn = hop.topic_of_facts(np.array([row, row]))
    assert fi.tolist() == [0, 1] and tn.tolist() == [hop.topic[pids.index("p-hillage")]] * 2


def test_keep_head_puts_the_first_walks_best_in_front_in_order():
    first, second = np.array([0.1, 0.5, 0.3, 0.0]), np.array([0.9, 0.0, 0.1, 0.8])
    out = keep_head(first, second, 2)
    assert np.lexsort((np.arange(4), -out))[:4].tolist() == [1, 2, 0, 3]
    assert np.array_equal(keep_head(first, second, 0), second)


@pytest.mark.parametrize("strategy", [ReseedHop(keep_head=1), BridgeHop(keep_head=1, threshold=0.0)])
def test_second_hop_lifts_the_bridge_page_and_keeps_the_head(world, strategy):
    first = world["first"]
    out = strategy.refine(world["ctx"], world["R"], first, world["q"], world["q"], world["dense"])
    assert out.shape == first.shape
    assert rank_of(world, out[:, 0], "p-album") == rank_of(world, first[:, 0], "p-album") == 0
    assert rank_of(world, out[:, 0], "p-hillage") < rank_of(world, first[:, 0], "p-hillage")
    assert rank_of(world, out[:, 0], "p-other") > rank_of(world, out[:, 0], "p-hillage")


def test_reseed_adds_only_new_entities_of_the_best_sentence(world):
    ctx, R = world["ctx"], world["R"]
    seen = {}

    def spy(resets):
        seen["R"] = resets.copy()
        return world["first"]
    ctx2 = HopContext(ctx.hop, ctx.fact_mat, ctx.num_entities, ctx.passage_counts, ctx.passage_weight, spy)
    ReseedHop(top_passages=1, weight=1.0).refine(ctx2, R, world["first"], world["q"], world["q"], world["dense"])
    added = np.flatnonzero((seen["R"] - R)[:, 0] > 0)
    g = world["graph"]
    assert {g.node_ids[n] for n in added} == {entity_id("steve hillage")}
    ne = ctx.num_entities
    assert seen["R"][:ne, 0].sum() == pytest.approx(2 * R[:ne, 0].sum())      # weight 1: as much again


def test_requery_seeds_passages_from_the_moved_query(world):
    ctx, R, q = world["ctx"], world["R"], world["q"]
    seen = {}

    def spy(resets):
        seen["R"] = resets.copy()
        return world["first"]
    ctx2 = HopContext(ctx.hop, ctx.fact_mat, ctx.num_entities, ctx.passage_counts, 0.05, spy, ctx.passage_mat)
    out = RequeryHop(weight=0.5, keep_head=0).refine(ctx2, R, world["first"], q, q, world["dense"])
    assert np.array_equal(out, world["first"])
    row = world["fids"].index(hyperedge_id(PASSAGES["p-album"][0]))     # the best sentence of the top passage
    q2 = q[0].astype(np.float64) + 0.5 * ctx.fact_mat[row]
    d2 = ctx.passage_mat @ (q2 / np.linalg.norm(q2)).astype(np.float32)
    expect = 0.05 * (d2 - d2.min()) / (d2.max() - d2.min())
    nodes = world["hop"].passage_nodes
    np.testing.assert_allclose(seen["R"][nodes, 0], expect, rtol=1e-6)
    ne = ctx.num_entities
    assert np.array_equal(seen["R"][:ne], R[:ne])                        # entity seeds untouched


def test_no_seed_no_change(world):
    R = np.zeros_like(world["R"])
    R[world["hop"].passage_nodes, 0] = 1.0
    for strategy in (ReseedHop(keep_head=0), BridgeHop(keep_head=0)):
        out = strategy.refine(world["ctx"], R, world["first"], world["q"], world["q"], world["dense"])
        assert np.allclose(out, world["ctx"].run_ppr(R))


def test_registry_names():
    assert set(STRATEGIES) == {"reseed", "bridge", "requery"}
    assert all(STRATEGIES[n].name == n for n in STRATEGIES)
