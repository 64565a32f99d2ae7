"""Recognition memory: the LLM filter over candidate facts (between fact scoring and seeding).

:class:`RecognitionFilter` runs the DSPy program of :mod:`hippo_engine.retrieve.facts.filter_program`
(re-exported here) on the engine's ``LLMClient``: the question and its candidate facts in, the
relevant facts out, mapped back to the candidates. :meth:`RecognitionFilter.filter_many` filters
a batch of queries with one ``llm.generate_many`` call (concurrent requests on a server): DSPy
first formats every prompt (its LM stops before the LLM), the prompts go out together, and each
reply is then parsed by the same DSPy program, so results equal one ``filter`` call per query.
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import dspy
from dspy.utils.exceptions import AdapterParseError, DSPyError

from hippo_engine.datatypes import Triple
from hippo_engine.lenient_json import parse_json_lenient
from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse, unparseable_reason
from hippo_engine.normalize import normalize_phrase
from hippo_engine.progress import QUIET, Progress
from hippo_engine.retrieve.facts.filter_program import (  # noqa: F401 - re-exported: the filter's public names
    FIELD_NAMES,
    FILTER_PROGRAM_FILE,
    FILTER_SIGNATURE_PROMPT,
    METADATA_KEY,
    FactFilterProgram,
    FactFilterSignature,
    LLMClientEngine,
    LLMClientLM,
    build_filter_signature,
    default_filter_program_path,
    filter_demo_split,
    load_filter_program,
    read_filter_program_metadata,
    save_filter_program,
)

logger = logging.getLogger(__name__)

E = TypeVar("E", bound=BaseException)


# ----------------------------------------------------------------------------- fact I/O
def format_facts(facts: Sequence[Sequence[str]]) -> str:
    """Facts as the JSON text the filter sees: ``[["s", "p", "o"], ...]`` (UTF-8, not escaped)."""
    return json.dumps([list(f) for f in facts], ensure_ascii=False)


_FIELD_HEADER = re.compile(r"\[\[\s*##.*?##\s*\]\]")
_TRIPLE_KEYS = (("subject", "predicate", "object"), ("s", "p", "o"), ("head", "relation", "tail"))


def _as_triple(item: Any) -> Triple | None:
    if isinstance(item, Mapping):
        for keys in _TRIPLE_KEYS:
            if all(k in item for k in keys):
                item = [item[k] for k in keys]
                break
        else:
            return None
    if not isinstance(item, (list, tuple)) or len(item) != 3:
        return None
    if not all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in item):
        return None
    return tuple(str(x) for x in item)  # type: ignore[return-value]


def parse_fact_list(text: str) -> tuple[list[Triple], int]:
    """Parse the model's fact list (JSON, never code): ``(triples, n_malformed_items)``.

    Accepts a JSON list of triples, a single triple, a list of ``{"subject", "predicate",
    "object"}`` objects, or an object wrapping one such list (``{"facts": [...]}``); code fences
    and surrounding prose are tolerated. Raises ``ValueError`` when no list can be read.
    """
    cleaned = _FIELD_HEADER.sub(" ", text or "").strip()
    if not cleaned:
        raise ValueError("empty filter output")
    value = parse_json_lenient(cleaned)
    if isinstance(value, Mapping):
        lists = [v for v in value.values() if isinstance(v, list)]
        if len(lists) != 1:
            raise ValueError(f"filter output is a JSON object without one list of facts: {cleaned[:120]!r}")
        value = lists[0]
    if not isinstance(value, list):
        raise ValueError(f"filter output is not a JSON list: {cleaned[:120]!r}")
    single = _as_triple(value)
    if single is not None and all(isinstance(x, str) for x in value):
        return [single], 0
    triples, bad = [], 0
    for item in value:
        t = _as_triple(item)
        if t is None:
            bad += 1
        else:
            triples.append(t)
    return triples, bad


def _norm_key(triple: Sequence[str]) -> tuple[str, ...]:
    return tuple(normalize_phrase(x) for x in triple)


def match_to_candidates(output_facts: Sequence[Sequence[str]], candidates: Sequence[Sequence[str]],
                        max_kept: int) -> tuple[list[Triple], list[Triple]]:
    """Map output facts back to candidates: ``(kept, unmatched)``.

    An output fact matches the candidate equal to it, else the first candidate equal after
    phrase normalisation; facts matching no candidate are returned as ``unmatched``. ``kept``
    is in candidate order, without duplicates, at most ``max_kept`` long.
    """
    cands = [tuple(c) for c in candidates]
    exact = {c: i for i, c in reversed(list(enumerate(cands)))}
    normed: dict[tuple[str, ...], int] = {}
    for i, c in enumerate(cands):
        normed.setdefault(_norm_key(c), i)
    chosen: set[int] = set()
    unmatched: list[Triple] = []
    for fact in output_facts:
        fact = tuple(fact)
        idx = exact.get(fact)
        if idx is None:
            idx = normed.get(_norm_key(fact))
        if idx is None:
            unmatched.append(fact)  # type: ignore[arg-type]
        else:
            chosen.add(idx)
    kept: list[Triple] = []
    for i in sorted(chosen):
        if cands[i] not in kept:
            kept.append(cands[i])  # type: ignore[arg-type]
    return kept[:max_kept], unmatched


def _find_cause(exc: BaseException, kind: type[E]) -> E | None:
    """The first exception of type ``kind`` in ``exc``'s cause/context chain (DSPy wraps errors)."""
    seen = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, kind):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


# ----------------------------------------------------------------------------- the filter
@dataclass
class FilterInfo:
    """What happened in one filter call (``to_dict`` for logs and metadata).

    ``reason``: ``"kept"`` (some facts kept), ``"none_selected"`` (the model returned an empty
    list), ``"no_match"`` (it named facts, none among the candidates), ``"parse_error"``,
    ``"llm_error"``, ``"error"`` (another DSPy failure) or ``"no_candidates"`` (no LLM call).
    """

    reason: str
    n_candidates: int = 0
    n_output_facts: int = 0
    n_kept: int = 0
    unmatched: list = field(default_factory=list)
    n_malformed: int = 0
    raw_output: str | None = None
    error: str | None = None
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (triples as lists)."""
        d = dict(self.__dict__)
        d["unmatched"] = [list(t) for t in self.unmatched]
        return d


class _Planned(Exception):
    """Raised by the planning LM: DSPy built the request; the LLM has not been called."""

    def __init__(self, messages: list[dict], max_new_tokens: int | None, temperature: float | None):
        super().__init__("planned")
        self.messages, self.max_new_tokens, self.temperature = messages, max_new_tokens, temperature


class RecognitionFilter:
    """Keep the candidate facts that an LLM judges relevant to the question.

    ``llm``: the engine's ``LLMClient`` (its cache is used). ``program_path``: a program JSON
    saved by :func:`save_filter_program` (default ``prompts/filter_program.json``).
    ``max_kept``: at most this many facts survive (paper: 4).
    """

    def __init__(self, llm: LLMClient, program_path: str | Path | None = None, max_kept: int = 4, *,
                 max_new_tokens: int | None = None, temperature: float | None = None,
                 progress: Progress = QUIET):
        if not isinstance(max_kept, int) or max_kept <= 0:
            raise ValueError(f"max_kept must be a positive integer, got {max_kept!r}")
        self.llm = llm
        self.progress = progress   # a bar over the batch's LLM calls
        self.max_kept = max_kept
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.program_path = Path(program_path) if program_path is not None else default_filter_program_path()
        self.program = load_filter_program(self.program_path)
        # One LLM call per filter: no JSON-adapter second attempt after a parse failure.
        self._adapter = dspy.ChatAdapter(use_json_adapter_fallback=False)

    def filter(self, question: str, candidate_facts: Sequence[Sequence[str]]) -> tuple[list[Triple], dict]:
        """``(kept, info)``: the kept candidates (in candidate order, at most ``max_kept``) and a
        :class:`FilterInfo` dict. Failures are logged and keep nothing; they never raise. A reply
        that cannot be read (``reason="parse_error"``, ``error="unparseable reply: ..."``) is
        discarded from the LLM cache so that the next run asks again."""
        return self.filter_many([question], [candidate_facts])[0]

    def filter_many(self, questions: Sequence[str], candidates: Sequence[Sequence[Sequence[str]]]
                    ) -> list[tuple[list[Triple], dict]]:
        """:meth:`filter` for every (question, candidate facts) pair, with all LLM requests sent
        in one ``llm.generate_many`` batch (up to the client's ``max_concurrency`` at a time).
        Questions without candidates make no request. Returns one ``(kept, info)`` per question."""
        if len(questions) != len(candidates):
            raise ValueError(f"filter_many(): {len(questions)} questions but {len(candidates)} candidate lists")
        cands = [[tuple(str(x) for x in c) for c in cs] for cs in candidates]
        plans = {i: p for i, (q, cs) in enumerate(zip(questions, cands, strict=True))
                 if cs and (p := self._plan(q, cs)) is not None}
        groups: dict[tuple, list[int]] = {}
        for i, p in plans.items():
            groups.setdefault((p.max_new_tokens, p.temperature), []).append(i)
        replies: dict[int, LLMResponse | LLMError] = {}
        for (max_new, temp), idx in groups.items():
            out = self.llm.generate_many([plans[i].messages for i in idx], max_new_tokens=max_new,
                                         temperature=temp, desc="Recognition filter",
                                         show_progress=self.progress.show and len(idx) > 1)
            replies.update(zip(idx, out, strict=True))
        return [self._run(q, cs, self._replay(replies[i]) if i in replies else None)
                for i, (q, cs) in enumerate(zip(questions, cands, strict=True))]

    def _lm(self, send=None) -> LLMClientLM:
        return LLMClientLM(self.llm, max_new_tokens=self.max_new_tokens, temperature=self.temperature, send=send)

    def _plan(self, question: str, candidates: Sequence[Sequence[str]]) -> _Planned | None:
        """The request DSPy would send for this question (None: DSPy failed before sending;
        the filter then runs on its own and reports that failure)."""
        def stop(messages, max_new_tokens, temperature):
            raise _Planned(messages, max_new_tokens, temperature)

        try:
            with dspy.context(lm=self._lm(stop), adapter=self._adapter, disable_history=True):
                self.program(question=question, candidate_facts=format_facts(candidates))
        except Exception as e:  # DSPy may wrap the signal: look for it in the chain
            return _find_cause(e, _Planned)
        return None

    def _replay(self, reply: LLMResponse | LLMError | Any) -> Callable:
        """A ``send`` that answers the first request with ``reply`` (raising it if it is an
        error) and any further one with the LLM."""
        used: list[bool] = []

        def send(messages, max_new_tokens, temperature):
            if used:
                return self.llm.generate(messages, max_new_tokens=max_new_tokens, temperature=temperature)
            used.append(True)
            if isinstance(reply, BaseException):
                raise reply
            return reply

        return send

    def _run(self, question: str, candidates: Sequence[Sequence[str]], send=None) -> tuple[list[Triple], dict]:
        """One filter call; ``send`` answers the LLM request (None: ``llm.generate``)."""
        info = FilterInfo(reason="no_candidates", n_candidates=len(candidates))
        if not candidates:
            return [], info.to_dict()
        lm = self._lm(send)
        raw: str | None = None
        try:
            with dspy.context(lm=lm, adapter=self._adapter, disable_history=True):
                pred = self.program(question=question, candidate_facts=format_facts(candidates))
            raw = pred.relevant_facts
        except AdapterParseError as e:
            # The reply lacked DSPy's field markers; a bare JSON list in it is still accepted.
            raw = e.lm_response if isinstance(e.lm_response, str) else None
            if raw is None:
                info.reason, info.error = "parse_error", self._unusable(lm.client_engine, str(e))
        except (DSPyError, LLMError) as e:
            llm_err = _find_cause(e, LLMError)
            info.reason = "llm_error" if llm_err is not None else "error"
            info.error = f"{type(llm_err or e).__name__}: {llm_err or e}"
            if llm_err is None:
                self._unusable(lm.client_engine, "")
        finally:
            self._record_usage(info, lm.client_engine)
        if raw is None:
            logger.warning("fact filter %s for %r: %s", info.reason, question[:80], info.error)
            return [], info.to_dict()
        info.raw_output = raw
        try:
            facts, info.n_malformed = parse_fact_list(raw)
        except ValueError as e:
            info.reason, info.error = "parse_error", self._unusable(lm.client_engine, raw)
            logger.warning("fact filter output unreadable for %r: %s", question[:80], e)
            return [], info.to_dict()
        kept, unmatched = match_to_candidates(facts, candidates, self.max_kept)
        info.n_output_facts, info.n_kept, info.unmatched = len(facts), len(kept), unmatched
        if unmatched:
            logger.debug("fact filter named %d fact(s) not among the candidates", len(unmatched))
        if kept:
            info.reason = "kept"
        else:
            info.reason = "none_selected" if not facts else "no_match"
        return kept, info.to_dict()

    def _unusable(self, engine: LLMClientEngine, fallback: str) -> str:
        """Discard the replies of a filter call that could not be used from the LLM cache (the
        next run asks again) and return ``unparseable reply: <the reply's start>``."""
        for r in engine.responses:
            self.llm.discard(r)
        return unparseable_reason(engine.responses[-1].text if engine.responses else fallback)

    @staticmethod
    def _record_usage(info: FilterInfo, engine: LLMClientEngine) -> None:
        responses = engine.responses
        info.llm_calls = engine.calls
        info.prompt_tokens = sum(r.prompt_tokens for r in responses)
        info.completion_tokens = sum(r.completion_tokens for r in responses)
        info.cached = bool(responses) and all(r.cached for r in responses)


def recording_filter(rf: RecognitionFilter, failed: dict[str, list[str]]):
    """``rf.filter_many`` in the shape ``Retriever.search`` takes (kept facts per question),
    noting each question whose filter call failed (an LLM error, an unreadable reply, another
    DSPy failure) in ``failed`` (question -> error texts)."""
    def filter_many(questions, candidates):
        out = rf.filter_many(questions, candidates)
        for q, (_, info) in zip(questions, out, strict=True):
            if info.get("reason") in ("llm_error", "parse_error", "error"):
                failed.setdefault(q, []).append(f"recognition filter: {info.get('error')}")
        return [kept for kept, _ in out]
    return filter_many
