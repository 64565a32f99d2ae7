"""Routes about the server: health (the one route that never needs the access key), version, and
the workspaces (list, delete).

No ``from __future__ import annotations`` here: FastAPI reads the routes' annotations at run time,
and they name the per-prefix dependencies built inside the builders."""
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request

from hippo_engine import __version__
from hippo_engine.modes import mode_specs
from hippo_engine.service.errors import ApiError
from hippo_engine.service.routes_base import ERRORS, WORKSPACE_PATTERN, Scope, workspaces
from hippo_engine.service.schemas import Health, ModeList, Version, WorkspaceDeleted, WorkspaceList

#: the HTTP API's version (the routes and bodies of this module's package)
API_VERSION = "1"


def build_health(scope: Scope) -> APIRouter:
    """``GET /health``: the process is up (no access key needed, touches no index, takes no thread)."""
    router = APIRouter(prefix=scope.prefix, tags=["server"], responses={422: ERRORS[422]})
    Name = Annotated[Any, Depends(scope.name)]

    @router.get("/health", response_model=Health, summary="is the server up")
    async def health(name: Name) -> dict:
        """``{"status": "ok"}`` while the server runs; no access key needed. Answered in the event loop: it
        waits for no thread, lock or index, so a server busy with slow work still answers at once."""
        return {"status": "ok", "version": __version__}

    return router


def build_version(scope: Scope) -> APIRouter:
    """``GET /version``: the package and API versions."""
    router = APIRouter(prefix=scope.prefix, tags=["server"], responses=ERRORS)
    Name = Annotated[Any, Depends(scope.name)]

    @router.get("/version", response_model=Version, summary="versions")
    def version(name: Name) -> dict:
        """The hippo-engine version and the HTTP API's version."""
        return {"version": __version__, "api": API_VERSION}

    return router


def build_modes() -> APIRouter:
    """``GET /modes``: the retrieval modes (the web page's list; every registered mode)."""
    router = APIRouter(tags=["server"], responses=ERRORS)

    @router.get("/modes", response_model=ModeList, summary="the retrieval modes")
    def modes() -> dict:
        """Every registered retrieval mode, in order, with what it is made of and needs."""
        return {"modes": [m.describe() for m in mode_specs()]}

    return router


def build_workspaces() -> APIRouter:
    """``GET /workspaces`` and ``DELETE /workspaces/{name}``."""
    router = APIRouter(tags=["workspaces"], responses=ERRORS)

    @router.get("/workspaces", response_model=WorkspaceList, summary="list the workspaces")
    def list_workspaces(request: Request) -> dict:
        """The named workspaces (each a memory of its own, at ``/w/{name}/...``) with their document counts."""
        return {"workspaces": workspaces(request).list()}

    @router.delete("/workspaces/{name}", response_model=WorkspaceDeleted, summary="delete a workspace")
    def delete_workspace(request: Request, name: Annotated[str, Path(pattern=WORKSPACE_PATTERN)]) -> dict:
        """Delete a named workspace and everything in it (the default workspace cannot be deleted)."""
        if not workspaces(request).delete(name):
            raise ApiError(404, f"no workspace {name!r}")
        return {"deleted": name}

    return router
