"""What every router shares: the dependencies that resolve a request's memory, and the error
responses documented on every route.

Each router is built twice (:class:`Scope`): once for the default workspace (the server's
``--save-dir``, routes at ``/...``) and once for named workspaces (``/w/{workspace}/...``). Reads of
a workspace that does not exist are 404; writes (adding documents) create it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Path, Request

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


def workspaces(request: Request) -> Workspaces:
    """The server's workspaces."""
    return request.app.state.workspaces


def settings(request: Request) -> ServiceSettings:
    """The server's settings."""
    return request.app.state.settings


def open_memory(request: Request, name: str | None, *, create: bool) -> Memory:
    """The memory of workspace ``name`` (None: the default); 404 when absent and not ``create``."""
    try:
        return workspaces(request).get(name, create=create)
    except KeyError:
        raise ApiError(404, f"no workspace {name!r} (adding documents to /w/{name}/documents creates it)") from None


@dataclass(frozen=True)
class Scope:
    """The dependencies of one route prefix: ``read`` and ``write`` give the request's ``Memory``
    (``write`` creates a missing workspace), ``name`` its workspace name (None: the default)."""

    read: Callable[..., Any]
    write: Callable[..., Any]
    name: Callable[..., Any]
    prefix: str


def _default_scope() -> Scope:
    def read(request: Request) -> Any:
        return open_memory(request, None, create=False)

    def write(request: Request) -> Any:
        return open_memory(request, None, create=True)

    def name() -> str | None:
        return None

    return Scope(read, write, name, "")


def _workspace_scope() -> Scope:
    def read(request: Request, workspace: WorkspaceName) -> Any:
        return open_memory(request, workspace, create=False)

    def write(request: Request, workspace: WorkspaceName) -> Any:
        return open_memory(request, workspace, create=True)

    def name(workspace: WorkspaceName) -> str | None:
        return workspace

    return Scope(read, write, name, "/w/{workspace}")


#: the two route prefixes
SCOPES = (_default_scope(), _workspace_scope())
