"""Second-hop strategies (retrieve/second/second_hop.py) and their index (retrieve/second/hop_index.py) on a small
hand-built hyperedge graph: "Green" is an album by Steve Hillage, whose page names his wife."""
import numpy as np
import pytest

from hippo_engine.datatypes import Hyperedge as H
from hippo_engine.ids import entity_id, hyperedge_id
from hippo_engine.index.facts import graph_input
from hippo_engine.index.graph import build_graph
from hippo_engine.retrieve.facts.linking import Block
from hippo_engine.retrieve.ppr.kernel import PPRKernel
from hippo_engine.retrieve.second.hop_index import HopIndex
from hippo_engine.retrieve.second.second_hop import (
    STRATEGIES,
    BridgeHop,
    HopContext,
    ReseedHop,
    WideHop,
    keep_head,
    make_second_hop,
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

    ctx = HopContext(hop, fact_mat, graph.num_entities, ctx_counts, run_ppr)
    green = graph.node_index([entity_id("green")], entities=True)[0]
    R = np.zeros((graph.num_nodes, 1))
    R[green, 0] = 1.0 / ctx_counts[green]
    dense = (passage_mat @ q).astype(np.float64)[:, None]
    R[passage_nodes, 0] += 0.05 * (dense[:, 0] - dense.min()) / (dense.max() - dense.min())
    block = Block(0, 1, q[None, :], dense)
    return {"pids": pids, "graph": graph, "fids": fids, "hop": hop, "ctx": ctx, "R": R, "q": q[None, :],
            "dense": dense, "first": run_ppr(R), "block": block, "cols": np.array([0])}


def refine(world, strategy, R=None, ctx=None):
    return strategy.refine(ctx or world["ctx"], world["block"], world["cols"], world["R"] if R is None else R,
                           world["first"])


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
    hill = g.node_index([entity_id("steve hillage")], entities=True)[0]
    assert hop.node_pages[hill].indices.tolist() == [pids.index("p-hillage")]


def test_keep_head_puts_the_first_walks_best_in_front_in_order():
    first, second = np.array([0.1, 0.5, 0.3, 0.0]), np.array([0.9, 0.0, 0.1, 0.8])
    out = keep_head(first, second, 2)
    assert np.lexsort((np.arange(4), -out))[:4].tolist() == [1, 2, 0, 3]
    assert np.array_equal(keep_head(first, second, 0), second)
    both = keep_head(np.column_stack([first, first]), np.column_stack([second, second]), 2)
    assert np.array_equal(both[:, 1], out)


@pytest.mark.parametrize("strategy", [ReseedHop(keep_head=1, target="entity"), ReseedHop(keep_head=1, target="page"),
                                      BridgeHop(keep_head=1, threshold=0.0)])
def test_second_hop_lifts_the_bridge_page_and_keeps_the_head(world, strategy):
    first = world["first"]
    out = refine(world, strategy)
    assert out.shape == first.shape
    assert rank_of(world, out[:, 0], "p-album") == rank_of(world, first[:, 0], "p-album") == 0
    assert rank_of(world, out[:, 0], "p-hillage") < rank_of(world, first[:, 0], "p-hillage")
    assert rank_of(world, out[:, 0], "p-other") > rank_of(world, out[:, 0], "p-hillage")


def _spy(world):
    ctx, seen = world["ctx"], {}

    def run(resets):
        seen["R"] = resets.copy()
        return world["first"]
    return HopContext(ctx.hop, ctx.fact_mat, ctx.num_entities, ctx.passage_counts, run), seen


def test_reseed_adds_only_new_entities_of_the_best_sentence(world):
    R, g, ne = world["R"], world["graph"], world["ctx"].num_entities
    ctx, seen = _spy(world)
    refine(world, ReseedHop(top_passages=1, weight=1.0, target="entity"), ctx=ctx)
    added = np.flatnonzero((seen["R"] - R)[:, 0] > 0)
    assert {g.node_ids[n] for n in added} == {entity_id("steve hillage")}
    assert seen["R"][:ne, 0].sum() == pytest.approx(2 * R[:ne, 0].sum())      # weight 1: as much again
    refine(world, ReseedHop(top_passages=1, weight=0.5, target="page"), ctx=ctx)
    added = np.flatnonzero((seen["R"] - R)[:, 0] > 0)
    assert [g.node_ids[n] for n in added] == ["p-hillage"]                    # the bridge entity's page
    assert (seen["R"] - R)[added[0], 0] == pytest.approx(0.5 * R[:ne, 0].sum())


def test_bridge_activates_through_the_best_sentences_only(world):
    g = world["graph"]
    green = g.node_index([entity_id("green")], entities=True)
    sims = world["ctx"].fact_sims(world["q"])[:, 0]
    act = BridgeHop(iterations=1, top_sentences=1, threshold=0.0).activated(world["ctx"], green, sims)
    names = {g.node_ids[n] for n in act}
    assert names == {entity_id("green"), entity_id("steve hillage")}   # the album sentence: the best of green's
    deeper = BridgeHop(iterations=2, top_sentences=1, threshold=0.0).activated(world["ctx"], green, sims)
    assert entity_id("miquette giraudy") in {g.node_ids[n] for n in deeper}
    assert BridgeHop(threshold=2.0).activated(world["ctx"], green, sims) == {int(green[0]): 1.0}


def test_wide_walk_is_seeded_from_more_sentences(world):
    calls = {}

    class Linking:
        def links(self, g, block):
            calls["kept"] = block.kept.copy()
            return "links"

        def resets(self, g, links, block, cols):
            calls["cols"] = cols
            return world["R"] * 2, None

    def top_facts(q, k):
        calls["k"] = k
        return np.array([[3, 1]]), np.array([[1.0, 0.7]])
    ctx, seen = _spy(world)
    ctx = HopContext(ctx.hop, ctx.fact_mat, ctx.num_entities, ctx.passage_counts, ctx.run_ppr, Linking(), "graph",
                     top_facts)
    out = refine(world, WideHop(sentences=2, keep_head=1), ctx=ctx)
    assert calls["k"] == 2 and calls["kept"].tolist() == [[True, True]] and calls["cols"].tolist() == [0]
    assert np.array_equal(seen["R"], world["R"] * 2)
    assert np.array_equal(out, keep_head(world["first"], world["first"], 1))
    with pytest.raises(ValueError, match="wide"):
        refine(world, WideHop())


def test_no_seed_no_change(world):
    R = np.zeros_like(world["R"])
    R[world["hop"].passage_nodes, 0] = 1.0
    for strategy in (ReseedHop(keep_head=0), BridgeHop(keep_head=0)):
        out = refine(world, strategy, R=R)
        assert np.allclose(out, world["ctx"].run_ppr(R))


def test_registry_names():
    assert set(STRATEGIES) == {"reseed", "bridge", "wide"}
    assert all(STRATEGIES[n].name == n for n in STRATEGIES)
    assert make_second_hop("none") is None
    assert make_second_hop("wide", keep_head=3) == WideHop(keep_head=3)
    with pytest.raises(ValueError, match="wide, bridge, reseed"):
        make_second_hop("loop")
