"""What the MCP tools return (pydantic models, so clients get JSON with a published output schema),
the one-line explanation of why a recalled passage was found, and the one line that says what is
wrong with a tool's arguments (:func:`argument_errors`, in a reader's words).

The explanation line is built from an :class:`~hippo_engine.datatypes.Explanation`'s ``to_dict()``:
the seed entities with the largest shares of the passage's PPR score and the dense prior's share,
e.g. ``via 'Ilse Marrow' 62%, 'Lake Veloria' 15%; dense prior 20%``; a passage placed by the dense
ranking says so with its dense similarity and rank.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationError

#: seeds named in an explanation line; seeds below MIN_SHARE are only counted in "others"
SEEDS_NAMED = 3
MIN_SHARE = 0.01
NAME_WIDTH = 40


class RecalledPassage(BaseModel):
    """One passage found by recall."""

    id: str = Field(description="id of the document holding this passage (pass it to forget)")
    document_ids: list[str] = Field(description="all documents holding this passage (usually one)")
    passage_id: str = Field(description="the passage's own id (content hash)")
    rank: int = Field(description="1 for the best passage")
    score: float | None = Field(description="relevance score; compare only within one recall")
    text: str = Field(description="the passage (a title line, then the text, when it has a title)")
    explanation: str = Field(description="why it was found: seed entities and their shares of the score")


class RecallResult(BaseModel):
    """The passages recall found for a query, best first."""

    query: str
    mode: str
    passages: list[RecalledPassage]
    not_yet_searchable: int = Field(0, description="documents still waiting to be indexed (not found yet)")


class FailedDocument(BaseModel):
    """A document whose indexing failed."""

    id: str
    error: str


class RememberResult(BaseModel):
    """What became of the documents given to remember."""

    job_id: str = Field(description="the indexing job (memory_stats shows totals)")
    documents: list[str] = Field(description="ids of the documents, in the order given")
    status: str = Field(description="indexed (all searchable now), indexing (still running), "
                                    "failed or partly failed")
    indexed: int
    indexing: int = Field(description="documents not indexed yet (pending or in progress)")
    failed: list[FailedDocument]
    waited_s: float = Field(description="seconds this call waited for indexing")
    message: str


class ForgetResult(BaseModel):
    """Which ids were deleted."""

    deleted: list[str]
    unknown: list[str] = Field(description="ids that were not in memory (nothing to delete)")
    message: str


class Citation(BaseModel):
    """A passage the answer cites."""

    id: str = Field(description="id of the document holding the cited passage")
    document_ids: list[str]
    passage_id: str
    text: str


class AnswerResult(BaseModel):
    """A short answer written from recalled passages, with the passages it cites."""

    question: str
    answer: str = Field(description="the answer; empty when the reader gave none")
    citations: list[Citation] = Field(description="the passages the answer rests on, in the order cited")
    notes: list[str] = Field(description="what was done to the answer (cut, rejected as ungrounded) or "
                                         "what failed (the reader LLM)")


class MemoryStats(BaseModel):
    """How much is in memory."""

    workspace: str = Field(description="the memory's workspace ('default' for the main one)")
    documents: dict[str, int] = Field(description="documents by status: indexed, pending, processing, failed")
    stats: dict[str, Any] = Field(description="graph size (passages, entities, facts, edges), extractor, "
                                              "storage, version")


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%" if share >= 0.005 else "<1%"


def _name(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= NAME_WIDTH else text[:NAME_WIDTH - 3].rstrip() + "..."


def _dense_line(exp: dict[str, Any]) -> str:
    line = f"dense similarity {float(exp.get('dense_score', 0.0)):.2f} (dense rank {exp.get('dense_rank', '?')})"
    reason = exp.get("fallback_reason") or ""
    return f"{line}; no graph walk: {reason}" if exp.get("placed_by") == "dense_fallback" and reason else line


def _seed_line(exp: dict[str, Any]) -> str:
    seeds = sorted(exp.get("seeds") or [], key=lambda s: -float(s.get("share", 0.0)))
    named = [s for s in seeds[:SEEDS_NAMED] if float(s.get("share", 0.0)) >= MIN_SHARE]
    parts = [f"'{_name(s.get('entity', ''))}' {_pct(float(s['share']))}" for s in named]
    rest = sum(float(s.get("share", 0.0)) for s in seeds[len(named):])
    if rest >= MIN_SHARE:
        parts.append(f"{len(seeds) - len(named)} other seed(s) {_pct(rest)}")
    score = float(exp.get("score", 0.0))
    prior = float(exp.get("dense_prior", 0.0)) / score if score > 0 else 0.0
    if parts:
        return "via " + ", ".join(parts) + f"; dense prior {_pct(prior)}"
    if prior >= 1 - MIN_SHARE:
        return "no query entity leads here: dense prior only (its similarity to the query)"
    return f"graph walk from {len(seeds)} seed(s), none above {_pct(MIN_SHARE)}; dense prior {_pct(prior)}"


def explain_line(exp: dict[str, Any] | None, mode: str = "hipporag2") -> str:
    """One line saying why a passage was found, from ``Explanation.to_dict()`` data (``None``: the
    mode gives no explanation, e.g. ``naive`` dense retrieval)."""
    if exp is None:
        return "dense similarity to the query" if mode == "naive" else f"ranked by the {mode} mode"
    placed = exp.get("placed_by", "ppr")
    if placed in ("dense", "dense_fallback"):
        return _dense_line(exp)
    line = _seed_line(exp)
    if placed in ("dense_first", "dense_agree"):
        return f"placed first by dense similarity (dense rank {exp.get('dense_rank', '?')}); graph: {line}"
    return line


def argument_errors(error: ValidationError, shown: int = 3) -> str:
    """The first ``shown`` problems of ``error`` as ``field: problem; ...`` (without the values given)."""
    from hippo_engine.service import errors  # FastAPI-based: loaded when a call is refused
    problems = error.errors(include_url=False)
    parts = [f"{errors.validation_details([p])[0]['loc']}: {_problem(p)}" for p in problems[:shown]]
    more = f" (and {len(problems) - shown} more)" if len(problems) > shown else ""
    return "; ".join(parts) + more


#: pydantic error types -> what is wrong, in a reader's words (the rest: the validator's message)
PLAIN_PROBLEMS = {
    "missing": "is required", "string_type": "must be text (a string)", "list_type": "must be a list",
    "int_type": "must be a whole number", "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number", "bool_type": "must be true or false",
    "bool_parsing": "must be true or false", "string_too_short": "must not be empty",
}


def _problem(p: Any) -> str:
    """What is wrong with one argument in a reader's words; a limit's message says the value's size and
    the limit, as the HTTP API's do."""
    kind, ctx, value = p.get("type"), p.get("ctx") or {}, p.get("input")
    if kind in PLAIN_PROBLEMS:
        return PLAIN_PROBLEMS[kind]
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '').replace(chr(39), '')}"
    if kind == "too_short":
        return f"must hold at least {ctx.get('min_length')} item(s)"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}"
    if kind == "string_too_long" and isinstance(value, str):
        return f"{len(value):,} characters long; the limit is {ctx.get('max_length'):,}"
    if kind == "too_long":
        return f"{ctx.get('actual_length')} items in one call is over the limit of {ctx.get('max_length')}; " \
               "split them into several calls"
    if kind == "less_than_equal":
        return f"{value!r:.20} is over the limit of {ctx.get('le')}"
    from hippo_engine.service import errors
    return errors.validation_details([p])[0]["message"]
