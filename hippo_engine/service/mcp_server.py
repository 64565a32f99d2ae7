"""The memory as an MCP server (the official ``mcp`` SDK, 2.x): five tools an agent calls.

* ``remember(texts, ids?, wait?)``: store documents; waits (bounded) until they are indexed;
* ``recall(query, top_k?, mode?)``: passages with document ids, scores and a one-line explanation;
* ``answer(question, top_k?)``: a short answer from the reader LLM with the passages it cites;
* ``forget(ids)``: delete documents;
* ``memory_stats()``: documents by status, graph size, extractor, storage, version.

:func:`build_mcp` makes the server over a :class:`~hippo_engine.service.workspaces.Workspaces`
(one workspace's :class:`~hippo_engine.service.memory.Memory`). ``hippo-engine mcp`` serves it over
stdio (:mod:`hippo_engine.cli.mcp`); :func:`mcp_http` gives what an HTTP app needs to serve it over
streamable HTTP. Every door has the HTTP API's limits (:class:`~hippo_engine.service.limits.Limits`: the
server's at ``/mcp``, the defaults over stdio), in the tools' input schemas and checked before a tool
runs; :class:`MemoryServer` refuses arguments a tool does not take and says what is wrong in one line.

Mounting in the FastAPI app (``service/app.py``)::

    from hippo_engine.service.mcp_server import build_mcp, mcp_http

    mcp = mcp_http(build_mcp(workspaces))           # one per app: its session manager runs once
    app.add_route("/mcp", mcp.endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)

    @asynccontextmanager
    async def lifespan(app):
        async with mcp.lifespan():                  # required: runs the MCP session manager
            yield

``mcp.endpoint`` is a plain ASGI app (a Route, not a Mount, so ``/mcp`` is served without a redirect
to ``/mcp/``). A route added this way bypasses FastAPI dependencies: an API-key check must be an ASGI
middleware (or wrap the endpoint) to cover it. The SDK's DNS-rebinding protection accepts only
``127.0.0.1``, ``localhost`` and ``[::1]`` Host and Origin headers.

No ``from __future__ import annotations`` here: the tools' argument types are built in :func:`build_mcp`
from its limits, and the SDK reads the annotations at run time.
"""
import contextlib
import inspect
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp_types import ToolAnnotations
from pydantic import Field, ValidationError

from hippo_engine import __version__
from hippo_engine.config import ConfigError
from hippo_engine.inputs import ID_PATTERN, MAX_ID_CHARS, TEXT_PATTERN
from hippo_engine.modes import mode_specs
from hippo_engine.results import first_document_id
from hippo_engine.service.answering import RETRY_AFTER_S, AnswerSlots
from hippo_engine.service.limits import Limits
from hippo_engine.service.mcp_models import (
    AnswerResult,
    Citation,
    FailedDocument,
    ForgetResult,
    MemoryStats,
    RecalledPassage,
    RecallResult,
    RememberResult,
    argument_errors,
    explain_line,
)
from hippo_engine.service.schemas import Mode

#: seconds remember waits for indexing by default (MCP clients commonly give up on a call after ~60 s)
DEFAULT_WAIT_S = 45.0

INSTRUCTIONS = (
    "Long-term memory over a document index (HippoRAG 2: a knowledge graph of the documents' entities and "
    "facts, searched with Personalized PageRank). Store what is worth keeping with remember; look things up "
    "with recall (the evidence: passages with their document ids) or answer (a short cited answer written "
    "by an LLM); delete with forget by the ids remember and recall return; memory_stats says what is stored "
    "and whether indexing has finished.")

REMEMBER = (
    "Store documents in long-term memory so they can be recalled later. Each text is one document (a note, "
    "a fact, a passage, a message); a first line followed by a newline acts as its title. Give ids to name "
    "the documents (a known id with a new text replaces that document); without ids, ids are derived from "
    "the texts and returned. Waits (up to {wait:g} s) until the documents are indexed, so a recall right after "
    "finds them; the result says if indexing is still running (then they become searchable when it ends). "
    "Pass wait=false to return at once.")
RECALL = (
    "Search long-term memory for the passages relevant to a query (a question or keywords). Walks the "
    "knowledge graph from the entities in the query, so it also finds passages that answer a multi-hop "
    "question only together. Returns the best passages with the id of their document, a score (compare "
    "within one result only) and a one-line explanation of why each was found (which entities led there). "
    "Use it to see the evidence; use answer for a short written answer.")
ANSWER = (
    "Answer a question from long-term memory: recalls the top passages and has the reader LLM write a short "
    "answer that cites them. Returns the answer and the cited passages with their document ids. Slower than "
    "recall (one LLM call). An empty answer or a note saying it was rejected means memory does not hold the "
    "answer: check with recall.")
FORGET = (
    "Delete documents from long-term memory by their ids (as returned by remember, or the id of a recalled "
    "passage). Irreversible. Ids not in memory are listed as unknown, not an error.")
STATS = (
    "Report what long-term memory holds: documents by status (indexed, pending, processing, failed), graph "
    "size (passages, entities, facts), the extractor, storage backend and version. Use it to check that "
    "indexing has finished or why documents failed.")

@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """Bad input and failures the engine anticipates reach the agent as a tool error with the message
    (no traceback); anything else is the SDK's 'unexpected' error, logged on stderr."""
    try:
        yield
    except ToolError:
        raise
    except KeyError as e:
        raise ToolError(str(e.args[0]) if e.args else "not found") from e
    except (ValueError, ConfigError, RuntimeError, OSError) as e:
        raise ToolError(str(e) or type(e).__name__) from e


def _document_id(item: dict) -> str:
    """The id an agent passes to forget: the first document holding the passage."""
    return first_document_id(item.get("doc_ids") or [], item["id"])


class MemoryTools:
    """The tools' logic over one workspace (kept apart from the SDK so it reads and tests plainly)."""

    def __init__(self, workspaces: Any, workspace: str | None = None, *, wait_s: float = DEFAULT_WAIT_S,
                 poll_s: float = 0.2, slots: AnswerSlots | None = None):
        self.workspaces, self.workspace = workspaces, workspace
        self.wait_s, self.poll_s, self.slots = wait_s, poll_s, slots

    def memory(self) -> Any:
        """This server's Memory (the workspace is created on first use)."""
        return self.workspaces.get(self.workspace, create=True)

    # ------------------------------------------------------------------ remember
    async def remember(self, texts: list[str], ids: list[str] | None, wait: bool,
                       progress: Callable[[float, float, str], Any] | None = None) -> RememberResult:
        if ids is not None and len(ids) != len(texts):
            raise ToolError(f"ids: give one id per text ({len(ids)} ids for {len(texts)} texts), or none")
        docs = [{"text": t} if ids is None else {"id": i, "text": t} for t, i in zip(texts, ids or texts, strict=True)]
        with _tool_errors():
            memory = await anyio.to_thread.run_sync(self.memory)     # opening a workspace loads its index
            job = await anyio.to_thread.run_sync(memory.add, docs)
        t0 = time.monotonic()
        state = await self._wait(memory, job["job_id"], t0, progress) if wait else None
        return self._remembered(job, state, time.monotonic() - t0 if wait else 0.0)

    async def _wait(self, memory: Any, job_id: str, t0: float, progress) -> dict:
        """Poll the job until nothing is left to index or ``wait_s`` has passed."""
        delay = self.poll_s
        while True:
            state = await anyio.to_thread.run_sync(memory.job, job_id)
            if state is None:
                raise ToolError(f"indexing job {job_id} vanished (was the workspace deleted?)")
            p = state["progress"]
            left = p["pending"] + p["processing"]
            if progress is not None:
                await progress(p["indexed"] + p["failed"], p["total"], f"{p['indexed']} of {p['total']} indexed")
            if left == 0 or time.monotonic() - t0 >= self.wait_s:
                return state
            await anyio.sleep(min(delay, max(0.0, self.wait_s - (time.monotonic() - t0))))
            delay = min(1.0, delay * 1.5)

    def _remembered(self, job: dict, state: dict | None, waited: float) -> RememberResult:
        ids = list(job["documents"])
        if state is None:
            return RememberResult(job_id=job["job_id"], documents=ids, status="indexing", indexed=0,
                                  indexing=len(ids), failed=[], waited_s=0.0,
                                  message=f"{len(ids)} document(s) queued for indexing; recall finds them once "
                                          "indexed (memory_stats shows progress).")
        failed = [FailedDocument(id=d["id"], error=d.get("error") or "unknown error")
                  for d in state["documents"] if d["status"] == "failed"]
        p = state["progress"]
        left = p["pending"] + p["processing"]
        status = "indexing" if left else "failed" if failed and not p["indexed"] else \
            "partly failed" if failed else "indexed"
        parts = [f"{p['indexed']} of {p['total']} document(s) indexed in {waited:.1f} s"]
        gone = p.get("deleted", 0) + p.get("replaced", 0)
        if gone:
            parts.append(f"{gone} deleted or replaced by a newer version meanwhile")
        if left:
            parts.append(f"{left} still indexing after the {self.wait_s:g} s wait: recall finds them once "
                         "indexed (memory_stats shows progress)")
        if failed:
            parts.append(f"{len(failed)} failed: " + "; ".join(f"{f.id}: {f.error}" for f in failed[:3]))
        if status == "indexed":
            parts.append("recall finds them now")
        return RememberResult(job_id=job["job_id"], documents=ids, status=status, indexed=p["indexed"],
                              indexing=left, failed=failed, waited_s=round(waited, 3), message="; ".join(parts) + ".")

    # ------------------------------------------------------------------ recall, answer, forget, stats
    def recall(self, query: str, top_k: int, mode: str | None) -> RecallResult:
        explain = mode in (None, "hipporag2")
        with _tool_errors():
            memory = self.memory()
            result = memory.retrieve([query], top_k=top_k, mode=mode, explain=explain)[0]
            waiting = sum(memory.documents(status=s, limit=1)["total"] for s in ("pending", "processing"))
        mode_used = result.get("mode") or mode or "hipporag2"
        exps = {e["passage_id"]: e for e in result.get("explanations") or []}
        passages = [RecalledPassage(id=_document_id(p), document_ids=list(p.get("doc_ids") or []),
                                    passage_id=p["id"], rank=int(p.get("rank", i + 1)), score=p["score"],
                                    text=p["text"], explanation=explain_line(exps.get(p["id"]), mode_used))
                    for i, p in enumerate(result["passages"])]
        return RecallResult(query=query, mode=mode_used, passages=passages, not_yet_searchable=waiting)

    async def answer_bounded(self, question: str, top_k: int) -> AnswerResult:
        """:meth:`answer` on the server's answer slots (``--max-answers``, shared with ``POST /answer``): one
        more than the cap is a tool error at once; a call whose request is cancelled is told to stop and frees
        its slot. Without slots (stdio: one client) on a worker thread."""
        if self.slots is None:
            return await anyio.to_thread.run_sync(self.answer, question, top_k)
        slot = self.slots.take()
        if slot is None:
            raise ToolError(f"{self.slots.limit} answers are being made (the server's --max-answers); try again "
                            f"in {RETRY_AFTER_S} s")
        try:
            return await slot.run(lambda: self.answer(question, top_k))
        finally:
            slot.release()

    def answer(self, question: str, top_k: int) -> AnswerResult:
        with _tool_errors():
            out = self.memory().answer(question, top_k=top_k)
        cites = [Citation(id=_document_id(c), document_ids=list(c.get("doc_ids") or []), passage_id=c["id"],
                          text=c["text"]) for c in out.get("citations") or []]
        return AnswerResult(question=question, answer=out.get("answer") or "", citations=cites,
                            notes=[str(n) for n in out.get("notes") or []])

    def forget(self, ids: list[str]) -> ForgetResult:
        with _tool_errors():
            out = self.memory().delete(ids)
        deleted, unknown = list(out["deleted"]), list(out["unknown"])
        msg = f"deleted {len(deleted)} document(s)" + (f"; {len(unknown)} id(s) not in memory" if unknown else "")
        return ForgetResult(deleted=deleted, unknown=unknown, message=msg + ".")

    def stats(self) -> MemoryStats:
        with _tool_errors():
            stats = dict(self.memory().stats())
        docs = stats.get("documents")
        by_status = {str(k): int(v) for k, v in docs.items() if isinstance(v, int)} if isinstance(docs, dict) else {}
        return MemoryStats(workspace=self.workspace or "default", documents=by_status,
                           stats={k: v for k, v in stats.items() if k != "documents"})


@contextlib.contextmanager
def _root_logging_kept() -> Iterator[None]:
    """Leave the root logger's handlers and level as they were: the SDK's server calls
    ``logging.basicConfig`` when built, which in a host application that has not configured logging
    yet would add a handler of the SDK's and make the application's own ``basicConfig`` a no-op.
    The ``hippo-engine mcp`` command configures logging itself before building the server."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for h in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(h)
        root.setLevel(level)


class MemoryServer(MCPServer):
    """The SDK's server, stricter with arguments: a call with an argument the tool does not take is refused
    (a tool error naming it, as the HTTP API refuses unknown fields), and arguments that fail the tool's
    schema (its limits among them) get one short line naming each bad field (not the validator's report)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: tool name -> the arguments it takes
        self.tool_arguments: dict[str, tuple[str, ...]] = {}

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        takes = self.tool_arguments.get(name)
        unknown = sorted(set(arguments) - set(takes)) if takes is not None else []
        if unknown:
            raise ToolError(f"{name}: unknown argument(s) {', '.join(map(repr, unknown))}; {name} takes "
                            f"{', '.join(takes or ()) or 'no arguments'}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):
                raise ToolError(f"{name}: {argument_errors(e.__cause__)}") from e.__cause__
            raise


def build_mcp(workspaces: Any, workspace: str | None = None, *, wait_s: float = DEFAULT_WAIT_S,
              limits: Limits | None = None, slots: AnswerSlots | None = None) -> MCPServer:
    """An MCP server whose tools work on ``workspaces.get(workspace, create=True)`` (``None``: the
    default workspace); ``wait_s``: the longest remember waits for indexing; ``limits``: what one call
    may carry (texts, their length, query length, top_k; default ``Limits()``, the HTTP API's defaults),
    published in the tools' input schemas and checked before a tool runs; ``slots``: the HTTP server's
    answer slots (:mod:`.answering`), which the answer tool shares with ``POST /answer``."""
    tools, lim = MemoryTools(workspaces, workspace, wait_s=wait_s, slots=slots), limits or Limits()
    with _root_logging_kept():
        server = MemoryServer("hippo-engine", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")
    text = Annotated[str, Field(min_length=1, max_length=lim.max_text_chars, pattern=TEXT_PATTERN)]
    doc_id = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN)]
    query = Field(min_length=1, max_length=lim.max_query_chars, pattern=TEXT_PATTERN,
                  description="a question or keywords")
    top_k = Field(ge=1, le=lim.max_top_k, description="passages to return")

    async def remember(
            texts: Annotated[list[text], Field(min_length=1, max_length=lim.max_batch,  # type: ignore[valid-type]
                                               description="the documents' texts, one per document")],
            ctx: Context,
            ids: Annotated[list[doc_id] | None, Field(max_length=lim.max_batch,  # type: ignore[valid-type]
                                                      description="optional ids, one per text")] = None,
            wait: Annotated[bool, Field(description="wait until indexed (bounded)")] = True) -> RememberResult:
        return await tools.remember(texts, ids, wait, ctx.report_progress)

    mode_help = ("the retrieval mode (default hipporag2, the graph walk): " +
                 "; ".join(f"{m.name}: {m.summary}" for m in mode_specs()) +
                 " (modes that read communities build them on their first call)")

    def recall(query: Annotated[str, query],
               top_k: Annotated[int, top_k] = 5,
               mode: Annotated[Mode | None, Field(description=mode_help)] = None,
               ) -> RecallResult:
        return tools.recall(query, top_k, mode)

    async def answer(question: Annotated[str, Field(min_length=1, max_length=lim.max_query_chars, pattern=TEXT_PATTERN,
                                              description="the question to answer")],
               top_k: Annotated[int, Field(ge=1, le=lim.max_top_k, description="passages the reader reads")] = 5,
               ) -> AnswerResult:
        return await tools.answer_bounded(question, top_k)

    def forget(ids: Annotated[list[doc_id], Field(min_length=1, max_length=lim.max_batch,  # type: ignore[valid-type]
                                                  description="ids of the documents to delete")],
               ) -> ForgetResult:
        return tools.forget(ids)

    def memory_stats() -> MemoryStats:
        return tools.stats()

    _add_tools(server, (remember, recall, answer, forget, memory_stats), wait_s)
    return server


def _add_tools(server: MemoryServer, functions: tuple[Callable[..., Any], ...], wait_s: float) -> None:
    """Register the five tools with their titles, descriptions and hints, and the arguments each takes."""
    remember, recall, answer, forget, memory_stats = functions
    server.add_tool(remember, title="Remember documents", description=REMEMBER.format(wait=wait_s),
                    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False,
                                                idempotent_hint=True, open_world_hint=False))
    server.add_tool(recall, title="Recall passages", description=RECALL,
                    annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    server.add_tool(answer, title="Answer from memory", description=ANSWER,
                    annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    server.add_tool(forget, title="Forget documents", description=FORGET,
                    annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True,
                                                idempotent_hint=True, open_world_hint=False))
    server.add_tool(memory_stats, title="Memory statistics", description=STATS,
                    annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    for fn in functions:
        params = inspect.signature(fn).parameters
        server.tool_arguments[fn.__name__] = tuple(n for n, p in params.items() if p.annotation is not Context)


@dataclass
class McpHttp:
    """An MCP server ready to serve over streamable HTTP inside another ASGI app: route ``endpoint`` at
    the path (``/mcp``) and enter ``lifespan()`` in the app's lifespan (see the module docstring)."""

    server: MCPServer
    endpoint: StreamableHTTPASGIApp

    def lifespan(self) -> AbstractAsyncContextManager[None]:
        """The session manager's run (once per McpHttp)."""
        return self.server.session_manager.run()


def mcp_http(server: MCPServer, *, stateless: bool = False, json_response: bool = False,
             host_checked: bool = False) -> McpHttp:
    """Streamable HTTP for ``server`` (``stateless``: no MCP sessions, each request stands alone, e.g.
    behind a load balancer over several processes; ``json_response``: JSON replies instead of SSE).
    ``host_checked``: the app in front checks Host and Origin (``hippo_engine.service.hosts.HostGuard``,
    from ``--host``/``--allowed-hosts``/``--cors-origin``, JSON refusals), so the SDK's own check is off;
    otherwise the SDK's stays on (Host and Origin 127.0.0.1, localhost or [::1] with a port only)."""
    from mcp.server.transport_security import TransportSecuritySettings
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False) if host_checked else None
    server.streamable_http_app(stateless_http=stateless, json_response=json_response, host="127.0.0.1",
                               transport_security=security)
    return McpHttp(server, StreamableHTTPASGIApp(server.session_manager))
