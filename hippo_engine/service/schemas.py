"""The JSON bodies of the HTTP API (pydantic models; the OpenAPI schema at ``/openapi.json`` is built
from them). Requests refuse unknown fields (a typo is a 422 that names it, not a silently ignored
option); responses may carry more fields than listed (the memory's dicts pass through whole).
Size limits that depend on the server's settings (batch size, query length, top_k) are checked by
the routes, see :mod:`hippo_engine.service.limits`.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from hippo_engine.inputs import (
    ID_PATTERN,
    MAX_ID_CHARS,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_TITLE_CHARS,
    RULES,
    TEXT_PATTERN,
    TITLE_PATTERN,
    check_document_metadata,
)
from hippo_engine.modes import mode_names


def _known_mode(mode: str) -> str:
    names = mode_names()
    if mode not in names:
        raise ValueError(f"must be one of {', '.join(names)}")
    return mode


def _mode_enum(schema: dict[str, Any]) -> None:
    schema["enum"] = list(mode_names())


#: a retrieval mode: a registered one (:mod:`hippo_engine.modes`), checked when a request arrives; the schemas
#: list the modes registered when they are made (the OpenAPI schema: at the app's first ``/openapi.json``)
Mode = Annotated[str, AfterValidator(_known_mode), Field(json_schema_extra=_mode_enum)]
JobStatus = Literal["pending", "processing", "done", "failed"]
DocStatus = Literal["pending", "processing", "indexed", "failed"]
#: how a job shows each of its documents: also deleted (since) or replaced (added again since)
JobDocStatus = Literal["pending", "processing", "indexed", "failed", "deleted", "replaced"]
#: the engine's rules of a document (hippo_engine/inputs.py): text with a character that is not white space and no
#: NUL; an id with such a character, no control characters, at most MAX_ID_CHARS characters; a title of one line
Text = Annotated[str, Field(min_length=1, pattern=TEXT_PATTERN)]
DocId = Annotated[str, Field(min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN)]
#: what each pattern means, for messages (a client is told the engine's words rather than the regular expression)
PATTERNS = RULES
JSONObject = dict[str, Any]
#: the largest top_k the memory serves (``hippo_engine.service.memory.MAX_TOP_K``; a test keeps them equal);
#: the server's ``max_top_k`` setting may lower it
MAX_TOP_K = 200
#: an optional field whose JSON schema does not offer null (one of two alternatives: give one, leave the other out)
Absent = SkipJsonSchema[None]


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Reply(BaseModel):
    model_config = ConfigDict(extra="allow")


def _one_of(names: tuple[str, str]) -> dict[str, Any]:
    """JSON Schema: exactly one of two fields (as the model validator checks)."""
    return {"oneOf": [{"required": [names[0]], "not": {"required": [names[1]]}},
                      {"required": [names[1]], "not": {"required": [names[0]]}}]}


def _exactly_one(model: BaseModel, names: tuple[str, str]) -> None:
    given = [n for n in names if getattr(model, n) is not None]
    if len(given) != 1:
        raise ValueError(f"give exactly one of {names[0]!r} and {names[1]!r}")


# ------------------------------------------------------------------ documents
class DocumentIn(Request):
    id: DocId | None = Field(None, description="the document's id (default: derived from its text)")
    text: Text
    title: str | None = Field(None, max_length=MAX_TITLE_CHARS, pattern=TITLE_PATTERN,
                              description="one line; indexed as 'title\\ntext'")
    metadata: JSONObject | None = Field(None, description="stored with the document; `where` filters on it "
                                         "(left out: a known id keeps its stored metadata; {} clears it); "
                                         f"JSON nested at most {MAX_METADATA_DEPTH} deep, no NUL, at most "
                                         f"{MAX_METADATA_BYTES // 1024} KiB")

    @field_validator("metadata")
    @classmethod
    def _storable(cls, value: JSONObject | None) -> JSONObject | None:
        """The engine's check of stored metadata (depth, NUL, size), made before anything is accepted."""
        if value is None:
            return None
        try:
            return check_document_metadata(value, "metadata")
        except ValueError as e:
            raise ValueError(str(e).removeprefix("metadata: ")) from None


class AddDocuments(Request):
    documents: list[DocumentIn] = Field(min_length=1)


class DeleteDocuments(Request):
    ids: list[DocId] = Field(min_length=1)


class JobAccepted(Reply):
    job_id: str
    documents: list[str] = Field(description="the ids of the documents in the job")


class RetryAccepted(Reply):
    job_id: str | None = Field(description="null when no document had failed")
    documents: list[str]


class DocumentState(Reply):
    id: str
    status: JobDocStatus
    error: str | None = None


class Progress(Reply):
    total: int
    pending: int
    processing: int
    indexed: int
    failed: int


class Job(Reply):
    job_id: str
    status: JobStatus
    created: str | None = Field(None, description="ISO 8601, UTC")
    updated: str | None = None
    progress: Progress
    documents: list[DocumentState]


class DocumentSummary(Reply):
    id: str
    status: DocStatus
    title: str | None = None
    metadata: JSONObject | None = None
    error: str | None = None
    job_id: str | None = None
    updated: str | None = Field(None, description="ISO 8601, UTC")


class DocumentOut(DocumentSummary):
    text: str


class DocumentPage(Reply):
    documents: list[DocumentSummary]
    total: int
    offset: int
    limit: int


class Deleted(Reply):
    deleted: list[str]
    unknown: list[str]


# ------------------------------------------------------------------ queries
class QueryOptions(Request):
    top_k: int = Field(5, ge=1, le=MAX_TOP_K, description="passages per query")
    mode: Mode | None = Field(None, description="retrieval mode (default: the server's, hipporag2)")
    where: JSONObject | None = Field(None, description="only documents whose metadata match this filter")


class RetrieveRequest(QueryOptions):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_of(("query", "queries")))
    query: Text | Absent = None
    queries: list[Text] | Absent = Field(None, min_length=1)
    explain: bool = Field(False, description="add why each passage ranked where it did (hipporag2 mode)")

    @model_validator(mode="after")
    def _one_query_field(self) -> RetrieveRequest:
        _exactly_one(self, ("query", "queries"))
        return self

    def query_list(self) -> list[str]:
        return [self.query] if self.query is not None else list(self.queries or ())


class Passage(Reply):
    id: str
    text: str
    score: float | None = Field(description="null when not a finite number")
    doc_ids: list[str]
    rank: int | None = None


class RetrieveResult(Reply):
    query: str
    mode: str | None = None
    passages: list[Passage]
    explanations: list[JSONObject] | None = None


class RetrieveResponse(Reply):
    results: list[RetrieveResult]


class AnswerRequest(QueryOptions):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_one_of(("question", "query")))
    question: Text | Absent = None
    query: Text | Absent = Field(None, description="the same as question")
    stream: bool = Field(False, description="answer as server-sent events (also with Accept: text/event-stream): "
                                             "the reader's text as it is written (delta), then passages, "
                                             "answer, done")

    @model_validator(mode="after")
    def _one_question_field(self) -> AnswerRequest:
        _exactly_one(self, ("question", "query"))
        return self

    def text(self) -> str:
        return self.question if self.question is not None else str(self.query)


class Citation(Reply):
    id: str
    text: str
    doc_ids: list[str]


class AnswerResponse(Reply):
    question: str
    answer: str | None = Field(description="null when the memory holds no documents yet")
    citations: list[Citation]
    passages: list[Passage]
    notes: list[str] = []


class ExplainRequest(Request):
    query: Text
    passage_ids: list[DocId] | None = Field(None, min_length=1, description="explain these passages "
                                            "(default: the top `top_k` passages)")
    top_k: int | Absent = Field(None, ge=1, le=MAX_TOP_K, description="passages to explain (default 5), as /retrieve")
    top: int | Absent = Field(None, ge=1, le=MAX_TOP_K, deprecated="use top_k",
                              description="deprecated: the old name of top_k (accepted for one release)")
    where: JSONObject | None = None

    @model_validator(mode="after")
    def _one_top_field(self) -> ExplainRequest:
        names = [n for n in ("top_k", "top") if self.__dict__.get(n) is not None]
        if len(names) > 1:
            raise ValueError("give top_k or its old name top, not both")
        return self

    def top_value(self) -> int:
        """The passages to explain: ``top_k``, else the deprecated ``top``, else 5."""
        if self.top_k is not None:
            return self.top_k
        old = self.__dict__.get("top")            # (read without the deprecation warning of the attribute)
        return old if old is not None else 5

    def used_old_name(self) -> bool:
        return self.__dict__.get("top") is not None


class ExplainResponse(Reply):
    explanations: list[JSONObject]


class SubgraphNode(Reply):
    id: str
    label: str
    kind: str
    score: float | None = None


class SubgraphEdge(Reply):
    source: str
    target: str
    kind: str


class Subgraph(Reply):
    nodes: list[SubgraphNode]
    edges: list[SubgraphEdge]


# ------------------------------------------------------------------ server
class Health(Reply):
    status: Literal["ok"]
    version: str


class Version(Reply):
    version: str
    api: str


class ModeInfo(Reply):
    name: str
    summary: str
    sections: list[str]
    reads_context: bool = Field(description="the reader reads the mode's assembled context (else its top passages)")
    needs_communities: bool = Field(description="the mode reads communities (built on its first call)")
    snapshot: bool
    explainable: bool = Field(description="POST /explain serves it")
    config_section: str


class ModeList(Reply):
    modes: list[ModeInfo]


class WorkspaceInfo(Reply):
    name: str
    documents: int | None = None


class WorkspaceList(Reply):
    workspaces: list[WorkspaceInfo]


class WorkspaceDeleted(Reply):
    deleted: str


class ErrorDetail(BaseModel):
    loc: str
    message: str


class ErrorInfo(BaseModel):
    type: str
    message: str
    details: list[ErrorDetail] | None = None


class ErrorBody(BaseModel):
    error: ErrorInfo
