"""``graphrag_global``: nano-graphrag's global query (map-reduce over community reports) as a
search object.

``contexts``/``retrieve`` need no LLM: the ranked, batched reports (:class:`~.global_context.GlobalContextBuilder`,
injected) and the ranked communities' representative passages. ``answer`` (what ``rag_qa`` calls)
runs one map call per batch of each query's context and one reduce call per query that kept any
point (:mod:`.map_reduce`); a query whose batches gave no point is answered ``""`` without a reduce
call. Every answer's metadata counts its LLM calls (``llm_calls``, ``map_calls``) and tokens. A
context without reports (a ``where=`` filter shows passages only; no report fits) is read by the
standard reader instead, and its metadata says so (``"fallback": "reader"``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from hippo_engine.config import GraphRAGConfig, QueryParam
from hippo_engine.datatypes import HiContext, QuerySolution
from hippo_engine.graphrag.engine_search import EngineContextSearch
from hippo_engine.graphrag.global_context import GlobalContextBuilder, batches
from hippo_engine.graphrag.map_reduce import Point, map_messages, parse_points, reduce_messages, select_points
from hippo_engine.llm.base import LLMClient, LLMResponse
from hippo_engine.modes import ModeSpec
from hippo_engine.qa.reader import parse_answer
from hippo_engine.qa.reading import context_solution
from hippo_engine.retrieve.search import SearchParts


class GraphRAGGlobalSearch(EngineContextSearch):
    """``graphrag_global``; ``builder`` ranks and batches the reports, ``llm`` provides the LLM of
    the map and reduce calls; the reader's settings give their temperature and progress."""

    def __init__(self, spec: ModeSpec, config: GraphRAGConfig, builder: GlobalContextBuilder,
                 llm: Callable[[], LLMClient], **engine):
        super().__init__(spec, **engine)
        self.config, self.builder, self._llm = config, builder, llm

    @classmethod
    def build(cls, spec: ModeSpec, parts: SearchParts) -> GraphRAGGlobalSearch:
        gc = parts.config.graphrag
        return cls(spec, gc, GlobalContextBuilder(gc), parts.llm, **cls.engine_parts(parts))

    def own_contexts(self, queries: list[str], param: QueryParam) -> list[HiContext]:
        """Each query's batched reports (no LLM call)."""
        eng = self.engine()
        _, q_pass = self.encode(queries)
        return [self.builder.build(eng, q, q_pass[j], param, self.limit(param)) for j, q in enumerate(queries)]

    def answer(self, contexts: Sequence[HiContext], template=None, param: QueryParam | None = None
               ) -> tuple[list[QuerySolution], list[str], list[dict]]:
        """Map-reduce answers of the contexts: ``(solutions, responses, metadata)``."""
        param = param or QueryParam(mode="graphrag_global")
        rtype = param.response_type or self.config.graphrag_response_type
        solutions = [context_solution(c) for c in contexts]
        meta = [{"llm_calls": 0, "map_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "points": 0,
                 "points_used": 0, "context_tokens": dict(c.tokens), "error": None} for c in contexts]
        responses = [""] * len(contexts)
        plain = [i for i, c in enumerate(contexts) if not batches(c)]
        if plain:
            self._read_plain(contexts, plain, solutions, responses, meta, template)
        points = self._map(contexts, [i for i in range(len(contexts)) if i not in set(plain)], meta)
        self._reduce(contexts, points, rtype, solutions, responses, meta)
        return solutions, responses, meta

    def _read_plain(self, contexts, rows, solutions, responses, meta, template) -> None:
        sols, resp, md = self._reader().contexts([contexts[i] for i in rows], template)
        for i, s, r, m in zip(rows, sols, resp, md, strict=True):
            solutions[i], responses[i] = s, r
            meta[i].update({"llm_calls": 1, **m}, fallback="reader")     # 2 where the reader asked twice

    def _map(self, contexts, rows: list[int], meta: list[dict]) -> dict[int, list[Point]]:
        """One map call per batch of each context in ``rows``; the rated points per context."""
        jobs = [(i, b, map_messages(contexts[i].query, batch))
                for i in rows for b, batch in enumerate(batches(contexts[i]))]
        rs = self._reader().settings
        replies = self._llm().generate_many(
            [m for *_, m in jobs], max_new_tokens=self.config.graphrag_map_max_new_tokens,
            temperature=rs.temperature, show_progress=rs.progress.show, desc="graphrag_global map") if jobs else []
        out: dict[int, list[Point]] = {i: [] for i in rows}
        for (i, b, _), res in zip(jobs, replies, strict=True):
            _count(meta[i], res, "map_calls")
            if isinstance(res, LLMResponse):
                out[i].extend(parse_points(res.text, b))
            else:
                meta[i]["error"] = f"map: {type(res).__name__}: {res}"
        return out

    def _reduce(self, contexts, points: dict[int, list[Point]], rtype: str, solutions, responses, meta) -> None:
        count, budget = self.hirag.token_counter(), self.config.graphrag_reduce_tokens
        kept = {i: select_points(pts, count, budget) for i, pts in points.items()}
        rows = [i for i in points if kept[i]]
        for i, pts in points.items():
            meta[i]["points"], meta[i]["points_used"] = len(pts), len(kept[i])
        rs = self._reader().settings
        replies = self._llm().generate_many(
            [reduce_messages(contexts[i].query, kept[i], rtype) for i in rows], max_new_tokens=rs.max_new_tokens,
            temperature=rs.temperature, show_progress=rs.progress.show, desc="graphrag_global reduce") if rows else []
        for i, res in zip(rows, replies, strict=True):
            _count(meta[i], res, None)
            if isinstance(res, LLMResponse):
                responses[i] = res.text or ""
                solutions[i].answer = parse_answer(responses[i])
            else:
                meta[i]["error"] = f"reduce: {type(res).__name__}: {res}"
                solutions[i].errors.append(f"reader: {meta[i]['error']}")
        for i in points:
            if solutions[i].answer is None:
                solutions[i].answer = ""


def _count(meta: dict, res, counter: str | None) -> None:
    meta["llm_calls"] += 1
    if counter:
        meta[counter] += 1
    if isinstance(res, LLMResponse):
        meta["prompt_tokens"] += int(res.prompt_tokens or 0)
        meta["completion_tokens"] += int(res.completion_tokens or 0)
