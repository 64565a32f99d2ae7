"""The reader: answer questions from retrieved passages.

The reader prompt shows the top ``qa_top_k`` passages, each as ``Wikipedia Title: <passage>``
(``passage = "title\\ntext"``), or an assembled context (HiRAG modes), then ``Question: <q>`` and
``Thought: ``. A system instruction and one worked example (both loaded from ``prompts/``) come
first, in chat format. The model reasons
and ends with ``Answer: <answer>``; :func:`parse_answer` takes the text after the last
``Answer:``.

The default template cites: passages are numbered (``[1] Wikipedia Title: ...``), the system
instruction gets ``prompts/qa_cite.txt`` and the reply's ``[n]`` references become
``QuerySolution.citations`` (:mod:`.citations`); ``ReaderTemplate.without_citations()`` is the same
reader without numbers or markers. Every answer is cut to length and rejected when it is the worked
example's, found in no shown passage (:mod:`.grounding`).
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from hippo_engine.datatypes import QuerySolution  # noqa: F401 (re-exported: its old import path)
from hippo_engine.ids import chunk_id
from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse
from hippo_engine.llm.streaming import streamed_replies
from hippo_engine.progress import QUIET, Progress
from hippo_engine.prompts import load_json_prompt, load_prompt
from hippo_engine.qa.citations import parse_citations, strip_citations
from hippo_engine.qa.fit import fit_parts
from hippo_engine.qa.grounding import capped_inside_answer, cut_answer, example_leak, needs_follow_up

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = "qa_system.txt"
DEFAULT_EXAMPLES_PROMPT = "qa_example.json"
DEFAULT_CITE_PROMPT = "qa_cite.txt"
#: the follow-up turn sent after a reply without an Answer line, and the tokens its reply may use
FOLLOW_UP_PROMPT = "qa_short.txt"
FOLLOW_UP_TOKENS = 32
DEFAULT_PASSAGE_PREFIX = "Wikipedia Title: "


@dataclass(frozen=True)
class ReaderSettings:
    """What the reader reads of the configuration: passages per question (``qa_top_k``), the
    LLM's ``max_new_tokens`` and ``temperature``, and the ``progress`` of its LLM batches."""

    qa_top_k: int = 5
    max_new_tokens: int | None = None
    temperature: float | None = None
    progress: Progress = QUIET

    @classmethod
    def of(cls, config: Any) -> ReaderSettings:
        """The reader settings of a ``HippoConfig``."""
        return cls(config.qa_top_k, config.max_new_tokens, config.temperature, Progress.of(config))


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
    loads ours from ``prompts/``. With a ``cite_instruction`` the passages are numbered and the
    instruction is added to the system text; without one, ``[n]`` markers are taken out of the
    examples' responses."""

    system: str
    examples: tuple[ReaderExample, ...] = ()
    passage_prefix: str = DEFAULT_PASSAGE_PREFIX
    cite_instruction: str = ""

    @property
    def cites(self) -> bool:
        """Whether the reader is shown numbered passages and asked to cite them."""
        return bool(self.cite_instruction)

    def without_citations(self) -> ReaderTemplate:
        """The same template with unnumbered passages and no citation instruction."""
        return replace(self, cite_instruction="")

    def example_texts(self) -> list[str]:
        """Everything the worked examples show (passages, questions, responses)."""
        return [t for ex in self.examples for t in (*ex.passages, ex.question, ex.response)]

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
                   passage_prefix=data.get("passage_prefix", DEFAULT_PASSAGE_PREFIX),
                   cite_instruction=str(data.get("cite_instruction") or ""))

    @classmethod
    def from_prompt_files(cls, system_name: str = DEFAULT_SYSTEM_PROMPT,
                          examples_name: str = DEFAULT_EXAMPLES_PROMPT,
                          cite_name: str | None = DEFAULT_CITE_PROMPT) -> ReaderTemplate:
        """Load the system text, the examples JSON (``{"examples": [...]}``) and, unless
        ``cite_name`` is None, the citation instruction from ``prompts/``."""
        examples = load_json_prompt(examples_name)
        return cls.from_dict({"system": load_prompt(system_name).strip(),
                              "examples": examples.get("examples", []),
                              "cite_instruction": load_prompt(cite_name).strip() if cite_name else "",
                              **({"passage_prefix": examples["passage_prefix"]}
                                 if "passage_prefix" in examples else {})})


def default_reader_template(cite: bool = True) -> ReaderTemplate:
    """Our reader template (``prompts/qa_system.txt`` + ``prompts/qa_example.json``, and
    ``prompts/qa_cite.txt`` when ``cite``), read from the package's prompt files on each call
    (small files; no module-level cache)."""
    return ReaderTemplate.from_prompt_files(cite_name=DEFAULT_CITE_PROMPT if cite else None)


def as_template(template: ReaderTemplate | Mapping[str, Any] | None) -> ReaderTemplate:
    """``template`` as a ``ReaderTemplate`` (None: :func:`default_reader_template`)."""
    if template is None:
        return default_reader_template()
    return template if isinstance(template, ReaderTemplate) else ReaderTemplate.from_dict(template)


def format_reader_input(question: str, passages: Sequence[str],
                        passage_prefix: str = DEFAULT_PASSAGE_PREFIX, numbered: bool = False) -> str:
    """The user turn: each passage as ``<prefix><passage>`` (``[n] <prefix><passage>`` when
    ``numbered``), blank-line separated, then ``Question: <q>`` and ``Thought: ``."""
    blocks = [f"[{i}] {passage_prefix}{p}" if numbered else f"{passage_prefix}{p}"
              for i, p in enumerate(passages, 1)]
    blocks.append(f"Question: {question}\nThought: ")
    return "\n\n".join(blocks)


def build_reader_messages(question: str, passages: Sequence[str] = (),
                          template: ReaderTemplate | Mapping[str, Any] | None = None, *,
                          context: str | None = None) -> list[dict]:
    """Chat messages for one question: system, the worked example(s) as user/assistant turns,
    then the question with its passages. Pass exactly the passages the reader should see
    (the caller cuts to ``qa_top_k``), or an assembled ``context`` (e.g. ``HiContext.text``)
    that is shown as it is in their place (never numbered)."""
    template = as_template(template)
    cites = template.cites
    system = f"{template.system}\n\n{template.cite_instruction}" if cites else template.system
    messages: list[dict] = [{"role": "system", "content": system}]
    for ex in template.examples:
        messages.append({"role": "user", "content": format_reader_input(ex.question, ex.passages,
                                                                        template.passage_prefix, cites)})
        messages.append({"role": "assistant", "content": ex.response if cites else strip_citations(ex.response)})
    user = (format_reader_input(question, passages, template.passage_prefix, cites) if context is None
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


# ----------------------------------------------------------------------------- checking
def read_reply(sol: QuerySolution, text: str, shown: Sequence[str], template: ReaderTemplate,
               shown_ids: Sequence[str] | None = None, finish_reason: str | None = None) -> None:
    """Set ``sol.answer`` from a reply: parsed (:func:`parse_answer`), cut to a whole short unit or
    given up (:func:`~.grounding.cut_answer`: never a fragment), rejected (``""``, with the reason in
    ``sol.answer_notes``) when the token cap stopped the reply inside its answer (``finish_reason``
    ``"length"``) or when it is the worked example's answer and in no ``shown`` text; with
    ``shown_ids`` (a citing template) also ``sol.citations`` and ``sol.invalid_citations``."""
    body = _THINK_BLOCK.sub("", text or "")
    if capped_inside_answer(body, finish_reason):
        answer, notes = "", ["rejected: the reply reached the token cap before its answer line ended; "
                             "a cut answer would be a fragment"]
    else:
        answer, cut = cut_answer(parse_answer(text), marked=bool(_ANSWER_MARK.search(body)))
        notes = [cut] if cut else []
    if answer and example_leak(answer, shown, template.example_texts()):
        notes.append(f"rejected: {answer!r} is in the reader prompt's worked example and in no passage shown")
        answer = ""
    sol.answer, sol.answer_notes = answer, notes
    if shown_ids is not None:
        found = parse_citations(body, shown_ids)
        sol.citations, sol.invalid_citations = found.ids, found.invalid


def _shown_ids(sol: QuerySolution, k: int) -> list[str]:
    """The ids of the passages a solution's reader is shown (computed where none are attached)."""
    docs = list(sol.docs[:k])
    ids = list(sol.passage_ids[:k])
    return ids if len(ids) == len(docs) else [chunk_id(d) for d in docs]


# ----------------------------------------------------------------------------- reading
def _fitted_prompt(llm: LLMClient, sol: QuerySolution, template: ReaderTemplate, qa_top_k: int,
                   context: str | None, call: dict) -> tuple[list[dict], int, list[str]]:
    """``(messages, parts cut, texts shown)`` for one question: its top passages (or its assembled
    ``context``, by lines) cut to the reader's window where the client knows it (:mod:`.fit`);
    ``call``: the generation's ``max_new_tokens`` and ``temperature``. A client that fails to count
    (a model that does not load) leaves the prompt whole: the generation then reports the error."""
    if context is None:
        parts = list(sol.docs[:qa_top_k])

        def build(ps):
            return build_reader_messages(sol.question, list(ps), template)
    else:
        parts = context.split("\n")

        def build(ps):
            return build_reader_messages(sol.question, template=template, context="\n".join(ps))
    try:
        cut, msgs = fit_parts(llm, parts, build, call["max_new_tokens"], call["temperature"])
    except LLMError as e:
        logger.debug("reader: could not count the prompt's tokens (%s); not fitting it", e)
        cut, msgs = 0, build(parts)
    kept = parts[:len(parts) - cut]
    if cut:
        logger.warning("reader: the context of question %r is longer than the model's window; its last %d "
                       "%s were left out", sol.question[:80], cut, "line(s)" if context is not None else "passage(s)")
    return msgs, cut, kept if context is None else ["\n".join(kept)]


def reply_tokens(llm: LLMClient, max_new_tokens: int | None) -> int | None:
    """The reader's token cap for ``llm``: ``max_new_tokens``, lowered to the client's
    ``reader_reply_tokens`` where it has one (the packaged local readers: a few short sentences
    and the answer line fit; a small model that rambles on is stopped there instead of writing
    2,048 tokens). A client behind :class:`~hippo_engine.llm.cache.CachedLLM` is asked through it."""
    cap = getattr(getattr(llm, "inner", llm), "reader_reply_tokens", None)
    if not isinstance(cap, int) or cap <= 0:
        return max_new_tokens
    return min(max_new_tokens, cap) if max_new_tokens else cap


def follow_up(llm: LLMClient, prompts: Sequence[list[dict]], results: list, temperature: float | None,
              progress: Progress = QUIET) -> tuple[list, set[int]]:
    """(``results`` where each reply without an ``Answer:`` line and without a short answer of its own
    (:func:`~.grounding.needs_follow_up`) gets one more turn: the reply as the assistant's, then
    ``prompts/qa_short.txt`` asking for the answer line alone (at most ``FOLLOW_UP_TOKENS`` tokens).
    The reply becomes both texts joined by a line break (tokens summed, the second's finish reason);
    a failed follow-up leaves the first reply as it was; the positions asked a second time)."""
    todo = [i for i, r in enumerate(results) if isinstance(r, LLMResponse) and needs_follow_up(r.text or "")]
    if not todo:
        return results, set()
    ask = load_prompt(FOLLOW_UP_PROMPT).strip()
    batch = [[*prompts[i], {"role": "assistant", "content": results[i].text}, {"role": "user", "content": ask}]
             for i in todo]
    more = llm.generate_many(batch, max_new_tokens=FOLLOW_UP_TOKENS, temperature=temperature,
                             show_progress=progress.show, desc="QA answer lines")
    out = list(results)
    for i, extra in zip(todo, more, strict=True):
        if isinstance(extra, LLMResponse):
            first = results[i]
            out[i] = LLMResponse(f"{first.text}\n{extra.text or ''}", first.prompt_tokens + extra.prompt_tokens,
                                 first.completion_tokens + extra.completion_tokens, extra.finish_reason,
                                 cached=first.cached and extra.cached)
    return out, set(todo)


def _response_metadata(resp: LLMResponse | LLMError | Any) -> dict[str, Any]:
    if isinstance(resp, LLMResponse):
        return {"prompt_tokens": resp.prompt_tokens, "completion_tokens": resp.completion_tokens,
                "cached": resp.cached, "finish_reason": resp.finish_reason, "error": None}
    return {"prompt_tokens": 0, "completion_tokens": 0, "cached": False, "finish_reason": "error",
            "error": f"{type(resp).__name__}: {resp}"}


def answer_questions(llm: LLMClient, solutions: Sequence[QuerySolution], qa_top_k: int = 5,
                     progress: Progress = QUIET, *,
                     template: ReaderTemplate | Mapping[str, Any] | None = None,
                     max_new_tokens: int | None = None,
                     temperature: float | None = None,
                     contexts: Sequence[str] | None = None,
                     desc: str = "QA reading") -> tuple[list[str], list[dict]]:
    """Read every solution's top ``qa_top_k`` docs (or ``contexts[i]``, an assembled context,
    when given) and answer its question.

    Sets ``solution.answer`` (and, with a citing template over passages, ``citations``; see
    :func:`read_reply`) on each solution and returns ``(responses, metadata)``: the raw
    model replies and, per query, ``{"prompt_tokens", "completion_tokens", "cached",
    "finish_reason", "error", "context_cut", "llm_calls"}`` (``llm_calls``: 2 where the reply was asked
    once more for its answer line, :func:`follow_up`; ``context_cut``: passages or context lines left out
    to fit the model's window, :mod:`.fit`; 0 where the prompt fits or the client cannot count it).
    A failed LLM call gives the response and answer ``""`` and
    the error text in ``metadata[i]["error"]``; it never raises. An assembled context is shown
    unnumbered (the template without citations).
    """
    if qa_top_k <= 0:
        raise ValueError(f"qa_top_k must be positive, got {qa_top_k}")
    if not solutions:
        return [], []
    if contexts is not None and len(contexts) != len(solutions):
        raise ValueError(f"{len(contexts)} contexts for {len(solutions)} solutions")
    template = as_template(template) if contexts is None else as_template(template).without_citations()
    cap = reply_tokens(llm, max_new_tokens)
    call = {"max_new_tokens": cap, "temperature": temperature}
    fitted = [_fitted_prompt(llm, s, template, qa_top_k, None if contexts is None else contexts[i], call)
              for i, s in enumerate(solutions)]
    with streamed_replies():      # a caller streaming the answer (the service) reads these replies as written
        results = llm.generate_many([f[0] for f in fitted], max_new_tokens=cap,
                                    temperature=temperature, show_progress=progress.show, desc=desc)
        results, asked_twice = follow_up(llm, [f[0] for f in fitted], list(results), temperature, progress)
    responses: list[str] = []
    metadata: list[dict] = []
    for i, (sol, res) in enumerate(zip(solutions, results, strict=False)):
        meta = {**_response_metadata(res), "context_cut": fitted[i][1], "llm_calls": 2 if i in asked_twice else 1}
        if isinstance(res, LLMResponse):
            text = res.text or ""
            shown = fitted[i][2]
            read_reply(sol, text, shown, template,
                       _shown_ids(sol, len(shown)) if template.cites and contexts is None else None,
                       finish_reason=res.finish_reason)
        else:
            logger.warning("reader failed for question %r: %s", sol.question[:80], meta["error"])
            sol.errors.append(f"reader: {meta['error']}")
            text = ""
            sol.answer = ""
        responses.append(text)
        metadata.append(meta)
    return responses, metadata
