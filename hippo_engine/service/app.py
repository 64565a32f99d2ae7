"""The HTTP API of ``hippo-engine serve``: :func:`create_app` builds the FastAPI app over
:class:`~hippo_engine.service.workspaces.Workspaces`.

Every route is served twice: at ``/...`` for the default workspace (the ``--save-dir`` index) and at
``/w/{workspace}/...`` for named ones. Every route, ``/mcp`` and the web page included, checks the
``Host`` header (400) and, for a request that may change something, the ``Origin``
(403; :mod:`~hippo_engine.service.hosts`). With an access key every route but ``/health`` needs
``X-API-Key``. Bodies, batches and queries have limits (413/422); a body that stops arriving is
answered 408. Errors are JSON
(:mod:`~hippo_engine.service.errors`). CORS is off unless origins are given. The MCP server (when
:mod:`hippo_engine.service.mcp_server` is there) answers at ``/mcp`` and the web page at ``/``; the
OpenAPI schema is at ``/openapi.json`` and a page describing it at ``/docs`` (no external assets).

Start and stop: the lifespan opens the default workspace (models load before the first request)
and, at shutdown (uvicorn waits for the requests in flight first), closes every workspace; each
memory's ingestion thread finishes the batch it is indexing and stops. For ``--workers N``, uvicorn
imports :func:`app_from_env` in each worker process.
"""
from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.concurrency import run_in_threadpool

from hippo_engine import __version__
from hippo_engine.service import answering, errors, pages, routes_documents, routes_query, routes_server
from hippo_engine.service.hosts import HostGuard, HostPolicy
from hippo_engine.service.route_stats import RouteStats, RouteTimer, declared_paths
from hippo_engine.service.routes_base import SCOPES, JSONBody, known_query
from hippo_engine.service.security import KEY_HEADER, BodyLimit, BodyTimer, KeyGuard, key_dependency
from hippo_engine.service.settings import ServiceSettings

log = logging.getLogger("hippo_engine.service")
#: the health route at both prefixes (never needs the access key)
HEALTH = re.compile(r"^(/w/[^/]+)?/health$")

DESCRIPTION = ("Long-term memory over a HippoRAG 2 index: add documents (indexed in the background), "
               "retrieve passages, answer with citations, explain rankings. Every route also exists under "
               "`/w/{workspace}/` for an isolated memory of its own. Errors are JSON: "
               '`{"error": {"type", "message"}}`.')


def open_workspaces(settings: ServiceSettings) -> Any:
    """The server's :class:`~hippo_engine.service.workspaces.Workspaces` over ``settings.save_dir``."""
    from hippo_engine.service.workspaces import Workspaces
    return Workspaces(Path(settings.save_dir), rag_options=dict(settings.rag_options),
                      memory_options=dict(settings.memory_options), max_workspaces=settings.max_workspaces,
                      max_open=settings.max_open_workspaces, idle_s=settings.workspace_idle_s)


def create_app(settings: ServiceSettings, *, workspaces: Any = None, preload: bool = True) -> FastAPI:
    """The app over ``workspaces`` (default: :func:`open_workspaces` of ``settings``; the app closes
    them at shutdown either way). ``preload``: open the default workspace at startup."""
    ws = workspaces if workspaces is not None else open_workspaces(settings)
    extra_lifespans: list[Callable[[], AbstractAsyncContextManager[Any]]] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            stack.push_async_callback(run_in_threadpool, ws.close)
            if preload:
                await run_in_threadpool(ws.get, None, create=True)
            for enter in extra_lifespans:
                await stack.enter_async_context(enter())
            log.info("hippo-engine service ready (save dir %s)", settings.save_dir)
            yield
            log.info("hippo-engine service stopping: closing workspaces")

    app = FastAPI(title="hippo-engine", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  docs_url=None, redoc_url=None, default_response_class=JSONBody)
    app.state.settings, app.state.workspaces = settings, ws
    app.state.public_paths = {"/openapi.json", "/docs"}
    errors.install(app)
    _add_routes(app, settings)
    pages.install_docs(app)
    if settings.mount_mcp:
        _mount_mcp(app, ws, settings, extra_lifespans)
    if settings.mount_web:
        _mount_web(app)
    app.add_middleware(answering.AnswerGate, limit=settings.max_answers)    # innermost: after every check
    app.add_middleware(BodyTimer, timeout_s=settings.body_timeout_s)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    if settings.access_key:
        app.add_middleware(KeyGuard, key=settings.access_key, is_open=_open_path(app))
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST", "DELETE"], allow_headers=[KEY_HEADER, "Content-Type"])
    app.add_middleware(HostGuard, policy=HostPolicy.build(settings.host, settings.allowed_hosts,
                                                          settings.cors_origins))
    app.state.route_stats = RouteStats()     # GET /stats' "requests"; outermost: every answer is counted
    app.add_middleware(RouteTimer, stats=app.state.route_stats, templates=lambda: declared_paths(app))
    return app


def _open_path(app: FastAPI) -> Callable[[str], bool]:
    """The paths that need no access key: health, the OpenAPI schema and its page, the web page's files."""
    def is_open(path: str) -> bool:
        return bool(HEALTH.match(path)) or path in app.state.public_paths
    return is_open


def _add_routes(app: FastAPI, settings: ServiceSettings) -> None:
    strict = [Depends(known_query)]
    guarded = strict + ([Depends(key_dependency(settings.access_key))] if settings.access_key else [])
    for scope in SCOPES:
        app.include_router(routes_server.build_health(scope), dependencies=strict)
        app.include_router(routes_server.build_version(scope), dependencies=guarded)
        app.include_router(routes_documents.build(scope), dependencies=guarded)
        app.include_router(routes_query.build(scope), dependencies=guarded)
    app.include_router(routes_server.build_workspaces(), dependencies=guarded)
    app.include_router(routes_server.build_modes(), dependencies=guarded)


def _mount_mcp(app: FastAPI, ws: Any, settings: ServiceSettings,
               lifespans: list[Callable[[], AbstractAsyncContextManager[Any]]]) -> None:
    """The MCP server (streamable HTTP, stateless so that any worker can answer) at ``/mcp``."""
    try:
        from hippo_engine.service.mcp_server import build_mcp, mcp_http
    except ImportError:
        log.info("no MCP server module: /mcp is not served")
        return
    from hippo_engine.service.limits import Limits  # the REST routes' limits hold for the tools too
    slots = answering.slots_of(app.state, settings.max_answers)     # shared with POST /answer
    mcp = mcp_http(build_mcp(ws, limits=Limits.of(settings), slots=slots), stateless=True,
                   host_checked=True)     # HostGuard checks Host and Origin
    endpoint: Any = mcp.endpoint     # an ASGI app: Starlette routes to it as it is
    app.add_route("/mcp", endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    lifespans.append(mcp.lifespan)


def _mount_web(app: FastAPI) -> None:
    """The web page's files at ``/`` (the page itself is ``index.html``)."""
    try:
        from hippo_engine.service import web
    except ImportError:
        return
    if (web.WEB_DIR / "index.html").is_file():
        app.state.public_paths |= pages.install_files(app, web.WEB_DIR, web.FILES)


def app_from_env() -> FastAPI:
    """The app of a uvicorn worker process (settings from the environment, see
    :meth:`ServiceSettings.from_env`); ``uvicorn --factory hippo_engine.service.app:app_from_env``.
    The worker's log gets the service's filters (:mod:`~hippo_engine.service.logfilters`)."""
    from hippo_engine.service.logfilters import install_log_filters
    install_log_filters()
    return create_app(ServiceSettings.from_env())
