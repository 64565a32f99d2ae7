"""Routes that read one workspace's memory: retrieve (one query or a batch, any mode, optional
explanations), answer (JSON, or server-sent events), explain, the subgraph around a query (for
the web page) and statistics.

No ``from __future__ import annotations`` here: FastAPI reads the routes' annotations at run time,
and they name the per-prefix dependencies built inside :func:`build`."""
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from hippo_engine.service import answering, limits, sse
from hippo_engine.service.errors import ApiError
from hippo_engine.service.routes_base import ERRORS, Scope, settings, warn_old_name
from hippo_engine.service.schemas import (
    MAX_TOP_K,
    TEXT_PATTERN,
    AnswerRequest,
    AnswerResponse,
    ErrorBody,
    ExplainRequest,
    ExplainResponse,
    RetrieveRequest,
    RetrieveResponse,
    Subgraph,
)

#: the status logged for an answer whose client left before it was ready (nginx's "client closed request")
CLIENT_CLOSED = 499
ERRORS_503 = {"model": ErrorBody, "description": "the most answers that may run at once are running "
                                                 "(Retry-After says when to try again)"}
#: the most graph nodes GET /subgraph returns
MAX_SUBGRAPH_NODES = 500
#: the answer route's responses: JSON, or the event stream
ANSWER_CONTENT = {"application/json": {}, sse.MEDIA_TYPE: {"schema": {
    "type": "object", "description": "one event (OpenAPI 3.1: the schema of each event): delta (a piece of the "
                                     "reader's text as it is written), passages, answer, done, "
                                     "or error; its data is one line of JSON",
    "properties": {"event": {"type": "string", "enum": list(sse.EVENTS)},
                   "data": {"type": "string", "contentMediaType": "application/json"}},
    "required": ["event", "data"]}}}


def wants_stream(body: AnswerRequest, request: Request) -> bool:
    """Server-sent events when the body asks (``stream``) or the client accepts only them."""
    accept = request.headers.get("accept", "")
    return body.stream or (sse.MEDIA_TYPE in accept and "json" not in accept)


def subgraph_top(top_k: int | None, top: int | None) -> int:
    """The passages ``GET /subgraph`` draws: ``top_k``, else ``top`` (its old name, with a warning in the log),
    else 5; both at once is a 422."""
    if top_k is not None and top is not None:
        raise ApiError(422, "give top_k or its old name top, not both", type="invalid_request")
    if top is not None:
        warn_old_name("/subgraph", "top", "top_k")
        return top
    return top_k if top_k is not None else 5


def build(scope: Scope) -> APIRouter:
    """The query routes of one prefix (see :class:`~hippo_engine.service.routes_base.Scope`)."""
    router = APIRouter(prefix=scope.prefix, tags=["queries"], responses=ERRORS)
    Read = Annotated[Any, Depends(scope.read)]

    @router.post("/retrieve", response_model=RetrieveResponse, response_model_exclude_unset=True,
                 summary="rank passages for queries")
    def retrieve(body: RetrieveRequest, request: Request, memory: Read) -> dict:
        """The top ``top_k`` passages of each query (``query`` or ``queries``), in ``mode``; with
        ``explain`` also why each ranked where it did; ``where`` filters on document metadata."""
        queries = body.query_list()
        limits.check_queries(settings(request), queries)
        limits.check_top_k(settings(request), body.top_k)
        results = memory.retrieve(queries, top_k=body.top_k, mode=body.mode, explain=body.explain,
                                  where=body.where)
        return {"results": results}

    @router.post("/answer", response_model=AnswerResponse, summary="answer a question with citations",
                 responses={200: {"content": ANSWER_CONTENT}, 503: ERRORS_503})
    async def answer(body: AnswerRequest, request: Request, memory: Read) -> Any:
        """Retrieve, then answer with the reader LLM, citing the passages it used. With ``stream``
        (or ``Accept: text/event-stream``) the reply is server-sent events: delta (each piece of the reader's
        text as a local model writes it), passages, answer, done. At most ``--max-answers`` answers run at
        once (one more: 503 with ``Retry-After``); an answer whose client leaves stops at once."""
        question = body.text()
        limits.check_queries(settings(request), [question], "question")
        limits.check_top_k(settings(request), body.top_k)
        slot = answering.slots_of(request.app.state, settings(request).max_answers).take()
        if slot is None:
            raise answering.refusal(settings(request).max_answers)

        def call() -> dict:
            return memory.answer(question, top_k=body.top_k, mode=body.mode, where=body.where)

        if wants_stream(body, request):
            events = sse.stream_call(call, run=slot.run, disconnected=request.is_disconnected)
            return sse.ClosingStream(events, on_close=slot.release, media_type=sse.MEDIA_TYPE,
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            return await slot.run_while(call, request.is_disconnected)
        except answering.ClientGone:
            return Response(status_code=CLIENT_CLOSED)     # nobody reads it; the access log shows it
        finally:
            slot.release()

    @router.post("/explain", response_model=ExplainResponse, summary="why passages ranked where they did")
    def explain(body: ExplainRequest, request: Request, memory: Read) -> dict:
        """Per passage (the top ``top``, or ``passage_ids``): the seed entities' exact shares of its
        score, the dense prior, the check, the most probable walks and the candidate facts."""
        limits.check_queries(settings(request), [body.query])
        top = body.top_value()
        limits.check_top_k(settings(request), top, "top" if body.used_old_name() else "top_k")
        if body.used_old_name():
            warn_old_name("/explain", "top", "top_k")
        if body.passage_ids is not None:
            limits.check_batch(settings(request), len(body.passage_ids), "passage ids")
        return {"explanations": memory.explain(body.query, body.passage_ids, top, where=body.where)}

    @router.get("/subgraph", response_model=Subgraph, summary="the graph around a query")
    def subgraph(request: Request, memory: Read,
                 query: Annotated[str, Query(min_length=1, pattern=TEXT_PATTERN)],
                 top_k: Annotated[int | None, Query(ge=1, le=MAX_TOP_K)] = None,
                 top: Annotated[int | None, Query(ge=1, le=MAX_TOP_K, deprecated=True,
                                                  description="deprecated: the old name of top_k")] = None,
                 limit: Annotated[int, Query(ge=1, le=MAX_SUBGRAPH_NODES)] = 60) -> dict:
        """The query's seed entities and top ``top_k`` passages (default 5) with the graph edges between them
        (nodes and edges, at most ``limit`` nodes), as the web page draws them."""
        limits.check_queries(settings(request), [query])
        n = subgraph_top(top_k, top)
        limits.check_top_k(settings(request), n, "top" if top is not None else "top_k")
        return memory.subgraph(query, top=n, limit=limit)

    @router.get("/stats", response_model=dict[str, Any], summary="statistics of the memory")
    def stats(request: Request, memory: Read) -> dict:
        """Graph statistics, documents by status, the extractor, the storage and the version; under
        ``requests`` the server process's requests since it started, per route (method and path template):
        counts, client (4xx) and server (5xx) errors, latency p50/p90/p99, mean and max in ms."""
        return {**memory.stats(), "requests": request.app.state.route_stats.snapshot()}

    return router
