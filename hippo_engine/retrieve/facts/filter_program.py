"""The recognition filter's DSPy program and its bridge to the engine's LLM client.

The filter is a DSPy program: a ``dspy.Predict`` over :class:`FactFilterSignature`
(inputs: the question and the candidate facts as a JSON list of ``[subject, predicate, object]``
triples; output: the relevant facts as a JSON list of triples). Its instruction and
demonstrations are stored as a DSPy program JSON (``module.save(path)`` format, JSON only) at
``prompts/filter_program.json``; ``reproduce/build_filter_demos.py`` builds that file from data.

DSPy talks to the engine's own :class:`~hippo_engine.llm.base.LLMClient` through
:class:`LLMClientLM`, a ``dspy.LM`` (hence ``dspy.BaseLM``) subclass whose requests go to a
custom DSPy engine, :class:`LLMClientEngine`, that calls ``LLMClient.generate`` (or another
``send`` function). So every filter call goes through the engine's response cache and no DSPy
or LiteLLM network client, cache or retry loop is involved. DSPy 3.4 deprecates custom LMs that
override ``BaseLM.forward``; a custom engine (``complete(Request) -> Response``) is the supported
way. The LM is passed per call with ``dspy.context`` (never ``dspy.configure``).
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# LiteLLM (imported by DSPy) would otherwise try to download a model price list.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dspy  # noqa: E402
from dspy.lm15 import Message as _LMMessage  # noqa: E402
from dspy.lm15 import Response as _LMResponse  # noqa: E402
from dspy.lm15 import TextPart as _TextPart  # noqa: E402
from dspy.lm15 import Usage as _Usage  # noqa: E402

from hippo_engine.llm.base import LLMClient, LLMResponse  # noqa: E402
from hippo_engine.prompts import load_json_prompt, prompts_dir  # noqa: E402

#: ``send(messages, max_new_tokens, temperature) -> LLMResponse``: where an engine's requests go
SendFn = Callable[[list, "int | None", "float | None"], LLMResponse]

logger = logging.getLogger(__name__)


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

    def __init__(self, llm: LLMClient, send: SendFn | None = None):
        self.llm = llm
        self.send = send if send is not None else (
            lambda messages, max_new_tokens, temperature: llm.generate(
                messages, max_new_tokens=max_new_tokens, temperature=temperature))
        self.calls = 0
        self.responses: list[LLMResponse] = []

    def complete(self, request: Any) -> Any:
        """Answer one DSPy request through ``send`` (the LLM client's ``generate`` by default)."""
        messages = _request_messages(request)
        config = request.config
        self.calls += 1
        resp = self.send(messages, config.max_tokens, config.temperature)
        self.responses.append(resp)
        finish = resp.finish_reason if resp.finish_reason in ("stop", "length", "content_filter") else "stop"
        return _LMResponse(id=None, model=request.model,
                           message=_LMMessage.assistant((_TextPart(resp.text or ""),)),
                           finish_reason=finish,
                           usage=_Usage(input_tokens=resp.prompt_tokens, output_tokens=resp.completion_tokens))

    def stream(self, request: Any):  # pragma: no cover - DSPy streaming is not used
        """Not supported."""
        raise NotImplementedError("LLMClientEngine does not stream")

    def close(self) -> None:
        """Nothing to release: the LLMClient is borrowed."""


class LLMClientLM(dspy.LM):
    """A ``dspy.BaseLM`` that sends DSPy's chat messages to an engine ``LLMClient``.

    No network call, no DSPy response cache (the client has its own), no DSPy retries (the
    client retries). ``max_new_tokens``/``temperature`` of ``None`` use the client's defaults.
    """

    def __init__(self, llm: LLMClient, *, max_new_tokens: int | None = None,
                 temperature: float | None = None, send: SendFn | None = None):
        self.client_engine = LLMClientEngine(llm, send)
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
        """Run the filter on one question and its candidate facts (JSON text)."""
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
