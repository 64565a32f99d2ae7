"""Recognition memory: the LLM filter over candidate facts (spec section 2, step 4).

The filter is a DSPy program: a ``dspy.Predict`` over :class:`FactFilterSignature`
(inputs: the question and the candidate facts as a JSON list of ``[subject, predicate, object]``
triples; output: the relevant facts as a JSON list of triples). Its instruction and
demonstrations are stored as a DSPy program JSON (``module.save(path)`` format, JSON only) at
``prompts/filter_program.json``; ``reproduce/build_filter_demos.py`` builds that file from data.

DSPy talks to the engine's own :class:`~hippo_engine.llm.base.LLMClient` through
:class:`LLMClientLM`, a ``dspy.LM`` (hence ``dspy.BaseLM``) subclass whose requests go to a
custom DSPy engine, :class:`LLMClientEngine`, that calls ``LLMClient.generate``. So every
filter call goes through the engine's response cache and no DSPy or LiteLLM network client,
cache or retry loop is involved. DSPy 3.4 deprecates custom LMs that override
``BaseLM.forward``; a custom engine (``complete(Request) -> Response``) is the supported way.
The LM is passed per call with ``dspy.context`` (never ``dspy.configure``).
"""
from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# LiteLLM (imported by DSPy) would otherwise try to download a model price list.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from dspy.lm15 import Message as _LMMessage  # noqa: E402
from dspy.lm15 import Response as _LMResponse  # noqa: E402
from dspy.lm15 import TextPart as _TextPart  # noqa: E402
from dspy.lm15 import Usage as _Usage  # noqa: E402
from dspy.utils.exceptions import AdapterParseError, DSPyError  # noqa: E402

from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse  # noqa: E402
from hippo_engine.prompts import load_json_prompt, prompts_dir  # noqa: E402
from hippo_engine.text import normalize_phrase, parse_json_lenient  # noqa: E402

logger = logging.getLogger(__name__)

Triple = tuple[str, str, str]

FILTER_SIGNATURE_PROMPT = "filter_signature.json"
FILTER_PROGRAM_FILE = "filter_program.json"
METADATA_KEY = "hippo_engine"  # our entry inside the program JSON's "metadata" object
FIELD_NAMES = ("question", "candidate_facts", "relevant_facts")


def default_filter_program_path() -> Path:
    """``<repo>/prompts/filter_program.json``."""
    return prompts_dir() / FILTER_PROGRAM_FILE


# ----------------------------------------------------------------------------- DSPy <-> LLMClient
def _request_messages(request: Any) -> list[dict]:
    """Flatten a ``dspy.lm15.Request`` into ``[{"role", "content"}]`` chat messages."""
    messages: list[dict] = []
    if request.system is not None:
        system = request.system if isinstance(request.system, str) else "".join(
            getattr(p, "text", "") or "" for p in request.system)
        messages.append({"role": "system", "content": system})
    for m in request.messages:
        text = m.text
        if text is None:
            text = "\n".join(getattr(p, "text", "") or "" for p in m.parts)
        role = "system" if m.role == "developer" else m.role
        messages.append({"role": role, "content": text})
    return messages


class LLMClientEngine:
    """A DSPy 3.4 engine (``complete(Request) -> Response``) backed by an ``LLMClient``.

    Counts its calls in ``self.calls`` and keeps every ``LLMResponse`` in ``self.responses``
    (one engine is made per filter call, so both belong to that call). ``LLMError``
    propagates; DSPy wraps it.
    """

    def __init__(self, llm: LLMClient):
        self.llm = llm
        self.calls = 0
        self.responses: list[LLMResponse] = []

    def complete(self, request: Any) -> Any:
        messages = _request_messages(request)
        config = request.config
        self.calls += 1
        resp = self.llm.generate(messages, max_new_tokens=config.max_tokens, temperature=config.temperature)
        self.responses.append(resp)
        finish = resp.finish_reason if resp.finish_reason in ("stop", "length", "content_filter") else "stop"
        return _LMResponse(id=None, model=request.model,
                           message=_LMMessage.assistant((_TextPart(resp.text or ""),)),
                           finish_reason=finish,
                           usage=_Usage(input_tokens=resp.prompt_tokens, output_tokens=resp.completion_tokens))

    def stream(self, request: Any):  # pragma: no cover - DSPy streaming is not used
        raise NotImplementedError("LLMClientEngine does not stream")

    def close(self) -> None:
        """Nothing to release: the LLMClient is borrowed."""


class LLMClientLM(dspy.LM):
    """A ``dspy.BaseLM`` that sends DSPy's chat messages to an engine ``LLMClient``.

    No network call, no DSPy response cache (the client has its own), no DSPy retries (the
    client retries). ``max_new_tokens``/``temperature`` of ``None`` use the client's defaults.
    """

    def __init__(self, llm: LLMClient, *, max_new_tokens: int | None = None,
                 temperature: float | None = None):
        self.client_engine = LLMClientEngine(llm)
        name = str(getattr(llm, "model_name", None) or "unknown")
        super().__init__(model=f"hippo-engine/{name}", engine=self.client_engine, cache=False,
                         num_retries=0, temperature=temperature, max_tokens=max_new_tokens)


# ----------------------------------------------------------------------------- signature and program
class FactFilterSignature(dspy.Signature):
    """Select the candidate facts that help answer the question."""

    question: str = dspy.InputField()
    candidate_facts: str = dspy.InputField()
    relevant_facts: str = dspy.OutputField()


def build_filter_signature(spec: Mapping[str, Any] | None = None) -> type[dspy.Signature]:
    """:class:`FactFilterSignature` with the instruction and field descriptions of ``spec``
    (default: ``prompts/filter_signature.json``: ``{"instructions": str, "fields": {name: desc}}``)."""
    if spec is None:
        spec = load_json_prompt(FILTER_SIGNATURE_PROMPT)
    sig = FactFilterSignature.with_instructions(spec["instructions"])
    for name, desc in (spec.get("fields") or {}).items():
        if name not in FIELD_NAMES:
            raise ValueError(f"unknown filter field {name!r}; fields are {FIELD_NAMES}")
        sig = sig.with_updated_fields(name, desc=desc)
    return sig


class FactFilterProgram(dspy.Module):
    """The filter program: one ``dspy.Predict`` (named ``predict``) over the filter signature."""

    def __init__(self, signature: type[dspy.Signature] | None = None):
        super().__init__()
        self.predict = dspy.Predict(signature if signature is not None else build_filter_signature())

    def forward(self, question: str, candidate_facts: str) -> dspy.Prediction:
        return self.predict(question=question, candidate_facts=candidate_facts)


def _check_program_json(state: Any, path: Path) -> None:
    """Refuse a JSON that is not a saved :class:`FactFilterProgram` before DSPy reads it
    (DSPy matches saved fields to the signature by position, not by name)."""
    if not isinstance(state, dict) or not isinstance(state.get("predict"), dict):
        raise ValueError(f"{path} is not a saved fact-filter program (no 'predict' entry)")
    pred = state["predict"]
    sig = pred.get("signature")
    if not isinstance(sig, dict) or not isinstance(sig.get("instructions"), str):
        raise ValueError(f"{path}: 'predict.signature.instructions' missing")
    if len(sig.get("fields") or []) != len(FIELD_NAMES):
        raise ValueError(f"{path}: expected {len(FIELD_NAMES)} signature fields {FIELD_NAMES}")
    for i, demo in enumerate(pred.get("demos") or []):
        if not isinstance(demo, dict) or not set(demo) - {"augmented"} <= set(FIELD_NAMES):
            raise ValueError(f"{path}: demo {i} has fields other than {FIELD_NAMES}")
    if not isinstance(state.get("metadata"), dict) or "dependency_versions" not in state["metadata"]:
        raise ValueError(f"{path}: 'metadata.dependency_versions' missing (not a DSPy save file)")


def load_filter_program(path: str | Path | None = None) -> FactFilterProgram:
    """Load a program saved by :func:`save_filter_program` (JSON only; default
    ``prompts/filter_program.json``)."""
    path = Path(path) if path is not None else default_filter_program_path()
    if path.suffix.lower() != ".json":
        raise ValueError(f"filter programs are loaded from .json files only, got {path}")
    if not path.is_file():
        raise FileNotFoundError(f"filter program not found: {path}")
    _check_program_json(json.loads(path.read_text(encoding="utf-8")), path)
    program = FactFilterProgram()
    program.load(str(path))  # DSPy's JSON state loader (allow_pickle stays False)
    return program


def save_filter_program(program: FactFilterProgram, path: str | Path,
                        metadata: Mapping[str, Any] | None = None) -> Path:
    """Save with DSPy's ``module.save(path)`` (JSON) and add ``metadata`` under
    ``state["metadata"]["hippo_engine"]``, where DSPy's loader ignores it."""
    path = Path(path)
    if path.suffix.lower() != ".json":
        raise ValueError(f"filter programs are saved as .json files only, got {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    program.save(str(path))
    if metadata:
        state = json.loads(path.read_text(encoding="utf-8"))
        state.setdefault("metadata", {})[METADATA_KEY] = dict(metadata)
        path.write_text(json.dumps(state, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def read_filter_program_metadata(path: str | Path | None = None) -> dict:
    """Our metadata stored in a program JSON (``{}`` if none): source data, demo split, counts."""
    path = Path(path) if path is not None else default_filter_program_path()
    state = json.loads(path.read_text(encoding="utf-8"))
    return dict((state.get("metadata") or {}).get(METADATA_KEY) or {})


def filter_demo_split(path: str | Path | None = None) -> dict[str, list[str]]:
    """The training-question split recorded in a program JSON (default: ours).

    ``{"evaluation_ids": [...], "demo_pool_ids": [...], "demo_ids": [...]}``: MuSiQue train ids
    of the evaluation part, of the pool the demonstrations were drawn from (never evaluate on
    these) and of the questions actually used as demonstrations. Lists are empty when the file
    records no split.
    """
    meta = read_filter_program_metadata(path)
    split = meta.get("split") or {}
    return {"evaluation_ids": list(split.get("musique_train_evaluation_ids") or []),
            "demo_pool_ids": list(split.get("musique_train_demo_pool_ids") or []),
            "demo_ids": list(meta.get("demo_question_ids") or [])}


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


def _find_llm_error(exc: BaseException) -> LLMError | None:
    seen = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, LLMError):
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
        d = dict(self.__dict__)
        d["unmatched"] = [list(t) for t in self.unmatched]
        return d


class RecognitionFilter:
    """Keep the candidate facts that an LLM judges relevant to the question.

    ``llm``: the engine's ``LLMClient`` (its cache is used). ``program_path``: a program JSON
    saved by :func:`save_filter_program` (default ``prompts/filter_program.json``).
    ``max_kept``: at most this many facts survive (paper: 4).
    """

    def __init__(self, llm: LLMClient, program_path: str | Path | None = None, max_kept: int = 4, *,
                 max_new_tokens: int | None = None, temperature: float | None = None):
        if not isinstance(max_kept, int) or max_kept <= 0:
            raise ValueError(f"max_kept must be a positive integer, got {max_kept!r}")
        self.llm = llm
        self.max_kept = max_kept
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.program_path = Path(program_path) if program_path is not None else default_filter_program_path()
        self.program = load_filter_program(self.program_path)
        # One LLM call per filter: no JSON-adapter second attempt after a parse failure.
        self._adapter = dspy.ChatAdapter(use_json_adapter_fallback=False)

    def filter(self, question: str, candidate_facts: Sequence[Sequence[str]]) -> tuple[list[Triple], dict]:
        """``(kept, info)``: the kept candidates (in candidate order, at most ``max_kept``) and a
        :class:`FilterInfo` dict. Failures are logged and keep nothing; they never raise."""
        candidates = [tuple(str(x) for x in c) for c in candidate_facts]
        info = FilterInfo(reason="no_candidates", n_candidates=len(candidates))
        if not candidates:
            return [], info.to_dict()
        lm = LLMClientLM(self.llm, max_new_tokens=self.max_new_tokens, temperature=self.temperature)
        raw: str | None = None
        try:
            with dspy.context(lm=lm, adapter=self._adapter, disable_history=True):
                pred = self.program(question=question, candidate_facts=format_facts(candidates))
            raw = pred.relevant_facts
        except AdapterParseError as e:
            # The reply lacked DSPy's field markers; a bare JSON list in it is still accepted.
            raw = e.lm_response if isinstance(e.lm_response, str) else None
            if raw is None:
                info.reason, info.error = "parse_error", str(e)[:500]
        except (DSPyError, LLMError) as e:
            llm_err = _find_llm_error(e)
            info.reason = "llm_error" if llm_err is not None else "error"
            info.error = f"{type(llm_err or e).__name__}: {llm_err or e}"
        finally:
            self._record_usage(info, lm.client_engine)
        if raw is None:
            logger.warning("fact filter %s for %r: %s", info.reason, question[:80], info.error)
            return [], info.to_dict()
        info.raw_output = raw
        try:
            facts, info.n_malformed = parse_fact_list(raw)
        except ValueError as e:
            info.reason, info.error = "parse_error", str(e)
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

    @staticmethod
    def _record_usage(info: FilterInfo, engine: LLMClientEngine) -> None:
        responses = engine.responses
        info.llm_calls = engine.calls
        info.prompt_tokens = sum(r.prompt_tokens for r in responses)
        info.completion_tokens = sum(r.completion_tokens for r in responses)
        info.cached = bool(responses) and all(r.cached for r in responses)
