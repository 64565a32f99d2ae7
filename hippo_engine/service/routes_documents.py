"""Routes of the documents of one workspace: add a batch (202 and a job id, indexed in the
background), follow a job, list, read, delete (one or a batch) and retry the failed ones.

No ``from __future__ import annotations`` here: FastAPI reads the routes' annotations at run time,
and they name the per-prefix dependencies built inside :func:`build`."""
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi import Path as PathParam

from hippo_engine.service import limits
from hippo_engine.service.errors import ApiError
from hippo_engine.service.routes_base import ERRORS, Scope, open_memory, settings
from hippo_engine.service.schemas import (
    ID_PATTERN,
    AddDocuments,
    Deleted,
    DeleteDocuments,
    DocStatus,
    DocumentOut,
    DocumentPage,
    Job,
    JobAccepted,
    RetryAccepted,
)

#: the most documents one page of GET /documents lists, and the largest offset (a 64-bit database integer
#: holds it; JavaScript's numbers too)
MAX_PAGE = 500
MAX_OFFSET = 2 ** 53
DocIdPath = Annotated[str, PathParam(min_length=1, pattern=ID_PATTERN, description="a document id")]


def build(scope: Scope) -> APIRouter:
    """The documents routes of one prefix (see :class:`~hippo_engine.service.routes_base.Scope`)."""
    router = APIRouter(prefix=scope.prefix, tags=["documents"], responses=ERRORS)
    Read = Annotated[Any, Depends(scope.read)]
    Name = Annotated[str | None, Depends(scope.name)]

    @router.post("/documents", status_code=202, response_model=JobAccepted, summary="add a batch of documents")
    def add_documents(body: AddDocuments, request: Request, workspace: Name) -> dict:
        """Queue documents for indexing and return the job that follows them (``GET /jobs/{job_id}``).
        A document's id defaults to one derived from its text; a known id with another text replaces it.
        Adding to a workspace that does not exist creates it."""
        limits.check_documents(settings(request), body.documents)
        memory = open_memory(request, workspace, create=True)   # after the checks: a refused batch creates nothing
        return memory.add([d.model_dump(exclude_none=True) for d in body.documents])

    @router.get("/jobs/{job_id}", response_model=Job, summary="a job's status and progress")
    def get_job(job_id: Annotated[str, PathParam(min_length=1, pattern=ID_PATTERN)], memory: Read) -> dict:
        """The job's status (pending, processing, done, failed), progress and each document's status."""
        job = memory.job(job_id)
        if job is None:
            raise ApiError(404, f"no job {job_id!r}")
        return job

    @router.get("/documents", response_model=DocumentPage, summary="list documents")
    def list_documents(memory: Read, status: DocStatus | None = None,
                       offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
                       limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50) -> dict:
        """Documents with their status, optionally only those in one status, a page at a time."""
        return memory.documents(status=status, offset=offset, limit=limit)

    @router.post("/documents/delete", response_model=Deleted, summary="delete a batch of documents")
    def delete_documents(body: DeleteDocuments, request: Request, memory: Read) -> dict:
        """Remove documents by id; ids that are not in the memory are listed as ``unknown``."""
        limits.check_batch(settings(request), len(body.ids), "ids")
        return memory.delete(list(dict.fromkeys(body.ids)))

    @router.post("/documents/retry", response_model=RetryAccepted, status_code=202,
                 responses={200: {"model": RetryAccepted, "description": "no document had failed"}},
                 summary="retry the failed documents")
    def retry_failed(memory: Read, response: Response) -> dict:
        """Queue every failed document again (202 and the new job), or 200 with no job if none failed."""
        job = memory.retry_failed()
        if job is None:
            response.status_code = 200
            return {"job_id": None, "documents": []}
        return job

    @router.get("/documents/{doc_id:path}", response_model=DocumentOut, summary="one document")
    def get_document(doc_id: DocIdPath, memory: Read) -> dict:
        """One document: its text, title, metadata, status and error."""
        doc = memory.document(doc_id)
        if doc is None:
            raise ApiError(404, f"no document {doc_id!r}")
        return doc

    @router.delete("/documents/{doc_id:path}", response_model=Deleted, summary="delete one document")
    def delete_document(doc_id: DocIdPath, memory: Read) -> dict:
        """Remove one document (a pending one is cancelled); 404 if it is unknown."""
        result = memory.delete([doc_id])
        if doc_id in result.get("unknown", ()):
            raise ApiError(404, f"no document {doc_id!r}")
        return result

    return router
