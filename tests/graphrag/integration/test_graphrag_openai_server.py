"""graphrag_global and graphrag_local end to end against a real OpenAI-compatible HTTP server on
127.0.0.1 (tests/openai_server.py, scripted by content): the index (toy OpenIE), the community
reports and the queries all go through HTTP; the map calls are counted on the server, the reports
respect the batch budget, the reduce reads the points, and the only_need_context call sends nothing."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fakes import NgramEncoder
from helpers import CORPUS
from openai_server import FakeOpenAIServer

from hippo_engine import HippoRAG
from hippo_engine.config import QueryParam

sys.path.insert(0, str(Path(__file__).parents[1]))
from peer_fakes import MAP_SYSTEM, QUERIES, PeerResponder  # noqa: E402

pytestmark = pytest.mark.slow


def _map_requests(srv) -> list[dict]:
    return [r for r in srv.requests if r["body"]["messages"][0]["content"] == MAP_SYSTEM]


def test_graphrag_modes_over_http(tmp_path):
    responder = PeerResponder()
    with FakeOpenAIServer(responder=responder, max_requests=400) as srv:
        rag = HippoRAG(tmp_path / "idx", llm_model_name="scripted", encoder=NgramEncoder(), show_progress=False,
                       llm_base_url=srv.base_url, llm_api_key="k", llm_max_retries=0, llm_cache=False,
                       extractor="openie", use_filter=False, synonymy_threshold=0.6, max_cluster_size=3,
                       graphrag_report_tokens=30, graphrag_global_max_batches=3)
        rag.index(CORPUS)
        rag.build_communities()
        assert responder.calls["report"] > 0
        before = len(srv.requests)
        ctxs = rag.retrieve_context(QUERIES, mode="graphrag_global")
        sols, responses, meta = rag.rag_qa(QUERIES, param=QueryParam(mode="graphrag_global"))
        maps = _map_requests(srv)
        assert len(maps) == sum(m["map_calls"] for m in meta) and 0 < len(maps) <= 3 * len(QUERIES)
        assert len(srv.requests) - before == sum(m["llm_calls"] for m in meta)
        count = rag.hirag.token_counter()
        for r in maps:      # every map batch within the report budget
            user = r["body"]["messages"][-1]["content"]
            reports = user.split("Community reports:\n", 1)[1].rsplit("\n\nThe helpful points", 1)[0]
            assert sum(count(x) for x in reports.split("\n\n")) <= 30
        assert all(m["prompt_tokens"] > 0 for m in meta) and all(s.answer for s in sols)
        assert [c.communities for c in ctxs] == [c.communities for c in rag.retrieve_context(QUERIES,
                                                                                              mode="graphrag_global")]
        before = len(srv.requests)
        local, _, lmeta = rag.rag_qa(QUERIES[:1], param=QueryParam(mode="graphrag_local"))
        # one reader call, or two where the scripted reply has no answer line (the reader asks once for it)
        assert len(srv.requests) - before == lmeta[0]["llm_calls"] in (1, 2)
        assert "-----Backgrounds-----" in srv.requests[before]["body"]["messages"][-1]["content"]
        before = len(srv.requests)
        rag.rag_qa(QUERIES, param=QueryParam(mode="graphrag_global", only_need_context=True))
        assert len(srv.requests) == before
