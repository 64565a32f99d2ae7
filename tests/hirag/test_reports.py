"""Community reports: unreadable replies are retried once, then discarded from the LLM cache."""
import json

import numpy as np
from fakes import ScriptedLLM

from hippo_engine.hirag.clustering import cluster_entities
from hippo_engine.hirag.report_context import ReportInputs
from hippo_engine.hirag.reports import write_reports
from hippo_engine.index.graph import KIND_FACT, GraphData
from hippo_engine.llm.cache import CachedLLM


def two_cliques(size: int = 6) -> GraphData:
    """Two disjoint cliques of ``size`` entities (two communities)."""
    pairs = [(g * size + i, g * size + j) for g in (0, 1) for i in range(size) for j in range(i + 1, size)]
    src, dst = (np.array(x, np.int64) for x in zip(*pairs, strict=True))
    ids = np.array([f"entity-{i:04d}" for i in range(2 * size)], dtype=object)
    return GraphData(ids, 2 * size, src, dst, np.full(len(pairs), 2.0), np.full(len(pairs), KIND_FACT, np.uint8))


def inputs(g: GraphData) -> ReportInputs:
    return ReportInputs(g, lambda e: e.replace("entity-", "e"), lambda p: f"Title {p}\ntext of {p}", {})


def report_json(messages) -> str:
    ctx = messages[-1]["content"]
    first = next((ln[2:] for ln in ctx.splitlines() if ln.startswith("- ")), "group")
    return json.dumps({"title": f"About {first}", "summary": f"A group around {first}.", "findings": [],
                       "rating": 4})


def test_bad_replies_are_discarded_from_the_cache_after_the_retry(tmp_path):
    g = two_cliques()
    comms = cluster_entities(g, max_cluster_size=10, seed=0)
    healthy = []

    def respond(messages):
        if healthy:
            return report_json(messages)
        if messages[-1]["content"].startswith("Your reply could not be read"):
            # the correction turn: the first community gets it right, the second never does
            return report_json(messages[:-2]) if "e0000" in messages[-3]["content"] else "still not json"
        return "I think this group is nice."

    inner = ScriptedLLM(respond)
    cache = CachedLLM(inner, tmp_path / "cache.sqlite")
    reports, stats = write_reports(comms, inputs(g), cache, {})
    assert sorted(r.source for r in reports.values()) == ["fallback", "llm"] and inner.calls == 4
    assert len(cache) == 1                      # only the good retry reply is kept
    healthy.append(True)
    again, _ = write_reports(comms, inputs(g), cache, {})
    assert [r.source for r in again.values()] == ["llm", "llm"]
    assert inner.calls == 6                     # both first asks went to the model again
