"""The reader: answer questions from retrieved passages.

The reader prompt shows the top ``qa_top_k`` passages, each as ``Wikipedia Title: <passage>``
(``passage = "title\\ntext"``), or an assembled context (HiRAG modes), then ``Question: <q>`` and
``Thought: ``. A system instruction and one worked example (both loaded from ``prompts/``) come
first, in chat format. The model reasons
and ends with ``Answer: <answer>``; :func:`parse_answer` takes the text after the last
``Answer:``.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hippo_engine.datatypes import QuerySolution  # noqa: F401 (re-exported: its old import path)
from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse
from hippo_engine.prompts import load_json_prompt, load_prompt

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = "qa_system.txt"
DEFAULT_EXAMPLES_PROMPT = "qa_example.json"
DEFAULT_PASSAGE_PREFIX = "Wikipedia Title: "


@dataclass(frozen=True)
class ReaderSettings:
    """What the reader reads of the configuration: passages per question (``qa_top_k``), the
    LLM's ``max_new_tokens`` and ``temperature``, and whether to show progress."""

    qa_top_k: int = 5
    max_new_tokens: int | None = None
    temperature: float | None = None
    show_progress: bool = False

    @classmethod
    def of(cls, config: Any) -> ReaderSettings:
        """The reader settings of a ``HippoConfig``."""
        return cls(config.qa_top_k, config.max_new_tokens, config.temperature, config.show_progress)


# ----------------------------------------------------------------------------- template
@dataclass(frozen=True)
class ReaderExample:
    """One worked example: passages and question (the user turn) and the model's reply."""

    passages: tuple[str, ...]
    question: str
    response: str


@dataclass(frozen=True)
class ReaderTemplate:
    """What the reader prompt is made of: a system instruction, worked examples and the prefix
    put before each passage. A dataset may supply its own; :func:`default_reader_template`
    loads ours from ``prompts/``."""

    system: str
    examples: tuple[ReaderExample, ...] = ()
    passage_prefix: str = DEFAULT_PASSAGE_PREFIX

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReaderTemplate:
        """Build from ``{"system": str, "examples": [{"passages": [...], "question": str,
        "response": str}], "passage_prefix": str (optional)}``."""
        if not isinstance(data.get("system"), str):
            raise ValueError("a reader template needs a 'system' string")
        examples = []
        for i, ex in enumerate(data.get("examples") or []):
            try:
                examples.append(ReaderExample(tuple(ex["passages"]), ex["question"], ex["response"]))
            except (KeyError, TypeError) as e:
                raise ValueError(f"reader example {i} needs 'passages', 'question' and 'response'") from e
        return cls(system=data["system"], examples=tuple(examples),
                   passage_prefix=data.get("passage_prefix", DEFAULT_PASSAGE_PREFIX))

    @classmethod
    def from_prompt_files(cls, system_name: str = DEFAULT_SYSTEM_PROMPT,
                          examples_name: str = DEFAULT_EXAMPLES_PROMPT) -> ReaderTemplate:
        """Load the system text and the examples JSON (``{"examples": [...]}``) from ``prompts/``."""
        examples = load_json_prompt(examples_name)
        return cls.from_dict({"system": load_prompt(system_name).strip(),
                              "examples": examples.get("examples", []),
                              **({"passage_prefix": examples["passage_prefix"]}
                                 if "passage_prefix" in examples else {})})


def default_reader_template() -> ReaderTemplate:
    """Our reader template (``prompts/qa_system.txt`` + ``prompts/qa_example.json``), read from
    the package's prompt files on each call (two small files; no module-level cache)."""
    return ReaderTemplate.from_prompt_files()


def format_reader_input(question: str, passages: Sequence[str],
                        passage_prefix: str = DEFAULT_PASSAGE_PREFIX) -> str:
    """The user turn: each passage as ``<prefix><passage>``, blank-line separated, then
    ``Question: <q>`` and ``Thought: ``."""
    blocks = [f"{passage_prefix}{p}" for p in passages]
    blocks.append(f"Question: {question}\nThought: ")
    return "\n\n".join(blocks)


def build_reader_messages(question: str, passages: Sequence[str] = (),
                          template: ReaderTemplate | Mapping[str, Any] | None = None, *,
                          context: str | None = None) -> list[dict]:
    """Chat messages for one question: system, the worked example(s) as user/assistant turns,
    then the question with its passages. Pass exactly the passages the reader should see
    (the caller cuts to ``qa_top_k``), or an assembled ``context`` (e.g. ``HiContext.text``)
    that is shown as it is in their place."""
    if template is None:
        template = default_reader_template()
    elif not isinstance(template, ReaderTemplate):
        template = ReaderTemplate.from_dict(template)
    messages: list[dict] = [{"role": "system", "content": template.system}]
    for ex in template.examples:
        messages.append({"role": "user",
                         "content": format_reader_input(ex.question, ex.passages, template.passage_prefix)})
        messages.append({"role": "assistant", "content": ex.response})
    user = (format_reader_input(question, passages, template.passage_prefix) if context is None
            else f"{context}\nQuestion: {question}\nThought: ")
    messages.append({"role": "user", "content": user})
    return messages


# ----------------------------------------------------------------------------- parsing
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
# "Answer:", "**Answer:**", "**Answer**:", "Final answer :" ... the colon is required.
_ANSWER_MARK = re.compile(r"answer\s*[*_]*\s*:", re.IGNORECASE)
_WRAPPERS = "*_`\"“” \t"
_TRAILING_INITIALS = re.compile(r"(?:\b[A-Za-z]\.){2,}$")


def parse_answer(text: str) -> str:
    """The answer in a reader response: the text after the last ``Answer:``.

    Markdown around the mark or the answer (``**Answer:** **Paris**``), a leading bullet,
    surrounding quotes and one trailing period are removed; only the first non-empty line after
    the mark is kept. Without any ``Answer:`` mark the whole response, stripped, is returned.
    A ``<think>...</think>`` block is ignored.
    """
    if not text:
        return ""
    body = _THINK_BLOCK.sub("", text)
    marks = list(_ANSWER_MARK.finditer(body))
    if not marks:
        return body.strip()
    rest = body[marks[-1].end():]
    line = next((ln for ln in rest.splitlines() if ln.strip(_WRAPPERS)), "")
    ans = line.strip().lstrip("-•").strip(_WRAPPERS)
    if ans.endswith(".") and not _TRAILING_INITIALS.search(ans):
        ans = ans[:-1].rstrip(_WRAPPERS)
    return ans


# ----------------------------------------------------------------------------- reading
def _response_metadata(resp: LLMResponse | LLMError | Any) -> dict[str, Any]:
    if isinstance(resp, LLMResponse):
        return {"prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens,
                "cached": resp.cached, "finish_reason": resp.finish_reason, "error": None}
    return {"prompt_tokens": 0, "completion_tokens": 0, "cached": False, "finish_reason": "error",
            "error": f"{type(resp).__name__}: {resp}"}


def answer_questions(llm: LLMClient, solutions: Sequence[QuerySolution], qa_top_k: int = 5,
                     show_progress: bool = False, *,
                     template: ReaderTemplate | Mapping[str, Any] | None = None,
                     max_new_tokens: int | None = None,
                     temperature: float | None = None,
                     contexts: Sequence[str] | None = None,
                     desc: str = "QA reading") -> tuple[list[str], list[dict]]:
    """Read every solution's top ``qa_top_k`` docs (or ``contexts[i]``, an assembled context,
    when given) and answer its question.

    Sets ``solution.answer`` on each solution and returns ``(responses, metadata)``: the raw
    model replies and, per query, ``{"prompt_tokens", "completion_tokens", "cached",
    "finish_reason", "error"}``. A failed LLM call gives the response and answer ``""`` and
    the error text in ``metadata[i]["error"]``; it never raises.
    """
    if qa_top_k <= 0:
        raise ValueError(f"qa_top_k must be positive, got {qa_top_k}")
    if not solutions:
        return [], []
    if contexts is not None and len(contexts) != len(solutions):
        raise ValueError(f"{len(contexts)} contexts for {len(solutions)} solutions")
    batch = [build_reader_messages(s.question, list(s.docs[:qa_top_k]), template) if contexts is None
             else build_reader_messages(s.question, template=template, context=contexts[i])
             for i, s in enumerate(solutions)]
    results = llm.generate_many(batch, max_new_tokens=max_new_tokens, temperature=temperature,
                                show_progress=show_progress, desc=desc)
    responses: list[str] = []
    metadata: list[dict] = []
    for sol, res in zip(solutions, results, strict=False):
        meta = _response_metadata(res)
        if isinstance(res, LLMResponse):
            text = res.text or ""
            sol.answer = parse_answer(text)
        else:
            logger.warning("reader failed for question %r: %s", sol.question[:80], meta["error"])
            sol.errors.append(f"reader: {meta['error']}")
            text = ""
            sol.answer = ""
        responses.append(text)
        metadata.append(meta)
    return responses, metadata
