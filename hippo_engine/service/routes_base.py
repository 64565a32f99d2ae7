"""What every router shares: the dependencies that resolve a request's memory, and the error
responses documented on every route.

Each router is built twice (:class:`Scope`): once for the default workspace (the server's
``--save-dir``, routes at ``/...``) and once for named workspaces (``/w/{workspace}/...``). Reads of
a workspace that does not exist are 404; writes (adding documents) create it.
"""
from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Path, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from hippo_engine.service.errors import ApiError
from hippo_engine.service.schemas import ErrorBody
from hippo_engine.service.settings import ServiceSettings

if TYPE_CHECKING:
    from hippo_engine.service.memory import Memory
    from hippo_engine.service.workspaces import Workspaces

#: workspace names (the same rule as :class:`hippo_engine.service.workspaces.Workspaces`)
WORKSPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
WorkspaceName = Annotated[str, Path(pattern=WORKSPACE_PATTERN, description="a workspace: a memory of its own "
                                    "(lower-case letters, digits, '-' and '_'; created by its first write)")]

#: the error responses of every route (the JSON of :mod:`hippo_engine.service.errors`)
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in (
        (400, "malformed request"), (401, "missing or wrong access key (X-API-Key)"),
        (404, "no such workspace, job or document"), (413, "body, batch or query list over the server's limit"),
        (422, "invalid request (the message names the field)"))}


logger = logging.getLogger(__name__)
#: (route, old name) pairs already warned about in this process
_WARNED: set[tuple[str, str]] = set()


def warn_old_name(route: str, old: str, new: str) -> None:
    """Log once per process that a request to ``route`` used the deprecated name ``old`` for ``new``."""
    if (route, old) not in _WARNED:
        _WARNED.add((route, old))
        logger.warning("%s: %r is deprecated, use %r (the old name is accepted for one release)", route, old, new)


def finite(value: Any) -> Any:
    """``value`` with every float that is not finite (NaN, infinity) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


class JSONBody(JSONResponse):
    """The API's JSON responses: strict JSON, a non-finite number (which JSON cannot hold) sent as null."""

    def render(self, content: Any) -> bytes:
        try:
            return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
        except ValueError:
            return json.dumps(finite(content), ensure_ascii=False, allow_nan=False,
                              separators=(",", ":")).encode("utf-8")


def _query_names(dependant: Any) -> set[str]:
    """The query parameters of a FastAPI dependant and of its dependencies."""
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def known_query(request: Request) -> None:
    """Refuse query parameters the route does not take (a typo such as ``?lmit=5`` is a 422 that names
    it, as an unknown body field is, rather than a silently ignored option). Runs in the event loop (no
    thread: ``/health`` depends on it)."""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    allowed = getattr(route, "_known_query", None)
    if allowed is None:
        allowed = _query_names(dependant)
        route._known_query = allowed        # type: ignore[union-attr]
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        takes = ", ".join(sorted(allowed)) or "none"
        raise ApiError(422, f"unknown query parameter(s): {', '.join(map(repr, unknown))}; this route takes: {takes}",
                       type="validation_error")


def workspaces(request: Request) -> Workspaces:
    """The server's workspaces."""
    return request.app.state.workspaces


def settings(request: Request) -> ServiceSettings:
    """The server's settings."""
    return request.app.state.settings


def open_memory(request: Request, name: str | None, *, create: bool) -> Memory:
    """The memory of workspace ``name`` (None: the default); 404 when absent and not ``create``. A read
    also checks that a named workspace's folder is still there: another server process may have deleted
    the workspace since this one opened it. The request holds a lease on the workspace until it has been
    answered (the route's workspace dependency ends it: :func:`release_leases`), so it is not closed under
    it; 409 when creating one more workspace than ``--max-workspaces``, 503 (``Retry-After``) when every
    open workspace is busy."""
    from hippo_engine.service.workspaces import WorkspaceLimitError, WorkspacesBusyError
    ws = workspaces(request)
    missing = ApiError(404, f"no workspace {name!r} (adding documents to /w/{name}/documents creates it)")
    if name is not None and not create and not _folder_exists(ws, name):
        raise missing
    try:
        lease = getattr(ws, "lease", None)
        if lease is None:       # a plain workspaces object (no lifecycle): nothing to release
            return ws.get(name, create=create)
        held = lease(name, create=create)
    except KeyError:
        raise missing from None
    except WorkspaceLimitError as e:
        raise ApiError(409, str(e)) from None
    except WorkspacesBusyError as e:
        raise ApiError(503, str(e), headers={"Retry-After": str(e.retry_after)}) from None
    leases = getattr(request.state, "leases", None)
    if leases is None:
        leases = request.state.leases = []
    leases.append(held)
    return held.memory


def release_leases(request: Request) -> None:
    """End the request's leases on workspaces (see :func:`open_memory`)."""
    leases = getattr(request.state, "leases", None) or []
    request.state.leases = []
    for held in leases:
        held.release()


def _folder_exists(ws: Any, name: str) -> bool:
    path = getattr(ws, "path", None)
    return path is None or path(name).is_dir()


@dataclass(frozen=True)
class Scope:
    """The dependencies of one route prefix: ``read`` gives the request's ``Memory`` (404 for a workspace
    that does not exist; opened on the route thread pool), ``name`` its workspace name (None: the default; a
    write opens the memory with :func:`open_memory` once the request has passed its checks, creating the
    workspace). Both end the request's workspace leases once it has been answered (a stream: once sent)."""

    read: Callable[..., Any]
    name: Callable[..., Any]
    prefix: str


def _default_scope() -> Scope:
    async def read(request: Request) -> AsyncIterator[Any]:
        try:
            yield await run_in_threadpool(open_memory, request, None, create=False)
        finally:
            release_leases(request)

    async def name(request: Request) -> AsyncIterator[str | None]:
        try:
            yield None
        finally:
            release_leases(request)

    return Scope(read, name, "")


def _workspace_scope() -> Scope:
    async def read(request: Request, workspace: WorkspaceName) -> AsyncIterator[Any]:
        try:
            yield await run_in_threadpool(open_memory, request, workspace, create=False)
        finally:
            release_leases(request)

    async def name(request: Request, workspace: WorkspaceName) -> AsyncIterator[str | None]:
        try:
            yield workspace
        finally:
            release_leases(request)

    return Scope(read, name, "/w/{workspace}")


#: the two route prefixes
SCOPES = (_default_scope(), _workspace_scope())
