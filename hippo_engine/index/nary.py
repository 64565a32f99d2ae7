"""LLM n-ary facts (``extractor="nary"``): knowledge segments linked to their entities.

HyperGraphRAG's facts (spec ``llm-free.md``, "n-ary facts"): one LLM call per passage (prompt
``nary_facts.json``) answers with::

    {"segments": [{"text": str, "completeness": 0-10,
                   "entities": [{"name": str, "type": str, "description": str, "importance": 0-100}]}]}

Each kept segment becomes a :class:`~hippo_engine.datatypes.Hyperedge` ``(text, entity names)``; names
are kept as written (the index normalises them). Completeness, types, descriptions and importance
are kept in the results file as metadata; the graph uses only text and entities.

:func:`parse_nary` reads a reply and never raises: code fences, prose around the JSON, one JSON
object per line, truncation (only complete segments are kept), missing, extra or mistyped
fields, duplicates and garbage are tolerated; what cannot be used is counted in ``dropped``.
A reply with no usable segment list, or whose segments are all unusable, is an error: the
passage is asked once more with a reminder of the format, then reported as failed
(``unparseable reply: ...``; never stored as a success, and both replies are discarded from the
LLM cache) so that ``index()`` retries it on the next run. Model output is only ever
parsed as JSON, never evaluated.

Results persist in ``save_dir/nary_results_<llm>.json``::

    {"format": "hippo-engine/nary", "version": 1,
     "docs": [{"idx": <passage id>, "passage": str, "segments": [...], "dropped": int, "truncated": bool}]}

written atomically (temp file + rename) while the LLM works, so a crash loses (almost) no LLM
work and only passages missing from the file are sent to the LLM.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from hippo_engine.datatypes import Extraction
from hippo_engine.index.nary_parse import (  # noqa: F401 (parse_nary re-exported)
    FILE_FORMAT,
    FILE_VERSION,
    PROMPT_NAME,
    NaryEntity,
    NaryParse,
    NaryResult,
    NarySegment,
    parse_nary,
)
from hippo_engine.index.results_file import ResultsFile, safe_name
from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse, unparseable_reason
from hippo_engine.progress import QUIET, Progress
from hippo_engine.prompts import load_json_prompt, prompt_path
from hippo_engine.system import atomic_write_text

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------ prompt
def load_nary_prompt(name: str = PROMPT_NAME) -> dict:
    """The prompt file (``system``, ``user_template`` with ``{passage}``, ``retry_note``, ``examples``)."""
    p = load_json_prompt(name)
    ok = (isinstance(p, dict) and isinstance(p.get("system"), str) and isinstance(p.get("user_template"), str)
          and "{passage}" in p["user_template"] and isinstance(p.get("examples", []), list)
          and all(isinstance(ex, dict) and isinstance(ex.get("passage"), str) and "output" in ex
                  for ex in p.get("examples", [])))
    if not ok:
        raise ValueError(f"prompt file {prompt_path(name)}: expected an object with 'system', a 'user_template' "
                         "containing {passage} and 'examples' of {passage, output}")
    return p


def nary_messages(passage: str, prompt: dict | None = None, *, retry: bool = False) -> list[dict]:
    """The chat messages asking for the n-ary facts of ``passage`` (``retry``: with the reminder)."""
    p = prompt or load_nary_prompt()

    def user(text: str) -> str:
        return p["user_template"].replace("{passage}", text)

    msgs = [{"role": "system", "content": p["system"]}]
    for ex in p.get("examples", []):
        msgs.append({"role": "user", "content": user(ex["passage"])})
        msgs.append({"role": "assistant", "content": json.dumps(ex["output"], ensure_ascii=False)})
    last = user(passage)
    if retry and p.get("retry_note"):
        last += "\n\n" + p["retry_note"]
    msgs.append({"role": "user", "content": last})
    return msgs


# ------------------------------------------------------------------ the results file
def _bad(path: Path, where: str, what: str) -> ValueError:
    return ValueError(f"n-ary results file {path}: {where} {what}; fix or delete the file "
                      "(deleting it sends its passages to the LLM again)")


def _int_or_none(v: Any) -> bool:
    return v is None or (isinstance(v, int) and not isinstance(v, bool))


def _load_segment(path: Path, where: str, s: Any) -> NarySegment:
    if not isinstance(s, dict) or not isinstance(s.get("text"), str) or not s["text"].strip():
        raise _bad(path, where, "is not an object with a non-empty 'text'")
    ents = s.get("entities")
    if not isinstance(ents, list) or not ents:
        raise _bad(path, where, "has no 'entities' list")
    out = []
    for m, e in enumerate(ents):
        if not (isinstance(e, dict) and isinstance(e.get("name"), str) and e["name"].strip()
                and all(e.get(k) is None or isinstance(e.get(k), str) for k in ("type", "description"))
                and _int_or_none(e.get("importance"))):
            raise _bad(path, f"{where}.entities[{m}]", "is not a valid entity")
        out.append(NaryEntity(e["name"], e.get("type"), e.get("description"), e.get("importance")))
    if not _int_or_none(s.get("completeness")):
        raise _bad(path, where, "has a non-integer 'completeness'")
    return NarySegment(s["text"], tuple(out), s.get("completeness"))


def load_nary_file(path: str | os.PathLike) -> dict[str, NaryResult]:
    """Load a results file; a damaged one raises ``ValueError`` naming the file."""
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"n-ary results file not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"n-ary results file {path} is not valid JSON ({e}); fix or delete the file "
                         "(deleting it sends its passages to the LLM again)") from None
    if not isinstance(data, dict) or data.get("format") != FILE_FORMAT or not isinstance(data.get("docs"), list):
        raise _bad(path, "the top level", f"is not an object with format {FILE_FORMAT!r} and a 'docs' list")
    if data.get("version") != FILE_VERSION:
        raise _bad(path, "the top level", f"has version {data.get('version')!r}; this engine reads {FILE_VERSION}")
    out: dict[str, NaryResult] = {}
    for n, d in enumerate(data["docs"]):
        where = f"docs[{n}]"
        if not (isinstance(d, dict) and isinstance(d.get("idx"), str) and d["idx"]
                and isinstance(d.get("passage"), str) and isinstance(d.get("segments"), list)):
            raise _bad(path, where, "is not an object with 'idx', 'passage' and a 'segments' list")
        segs = [_load_segment(path, f"{where}.segments[{k}]", s) for k, s in enumerate(d["segments"])]
        dropped = d.get("dropped", 0)
        out[d["idx"]] = NaryResult(d["idx"], d["passage"], segs,
                                   dropped if isinstance(dropped, int) and not isinstance(dropped, bool) else 0,
                                   d.get("truncated") is True)
    return out


def save_nary_file(path: str | os.PathLike, results: Iterable[NaryResult]) -> None:
    """Write results atomically (temp file + fsync + rename), sorted by passage id."""
    data = {"format": FILE_FORMAT, "version": FILE_VERSION,
            "docs": [r.to_json() for r in sorted(results, key=lambda r: r.idx)]}
    atomic_write_text(path, json.dumps(data, ensure_ascii=False))


class _Saver:
    """Saves after every batch while saving is cheap; on large files, at most ~10% of the time
    goes to saving (the LLM cache, when on, keeps the replies in between). Always on close."""

    def __init__(self, file: ResultsFile):
        self.file = file
        self.dirty, self.cost, self.last = False, 0.0, 0.0

    def changed(self) -> None:
        self.dirty = True
        if time.perf_counter() - self.last >= 10 * self.cost:
            self.save()

    def save(self) -> None:
        if self.dirty:
            t = time.perf_counter()
            self.file.save()
            self.last = time.perf_counter()
            self.cost, self.dirty = self.last - t, False


# ------------------------------------------------------------------ the extractor
class NaryExtractor:
    """LLM n-ary facts with their results file (``nary_results_<llm>.json`` under ``save_dir``)."""

    name = "nary"

    def __init__(self, save_dir: Path, llm_name: str, llm: Callable[[], LLMClient], *, max_new_tokens: int | None,
                 progress: Progress = QUIET):
        self.path = Path(save_dir) / f"nary_results_{safe_name(llm_name)}.json"
        self._llm, self.llm_name = llm, llm_name
        self.max_new_tokens, self.progress = max_new_tokens, progress
        self.file = ResultsFile(self.path, load_nary_file, save_nary_file, "n-ary results file")
        self._prompt: dict | None = None

    @property
    def results(self) -> dict[str, NaryResult]:
        """The results file's content, read when first needed (a damaged file does not stop
        opening the index to query or delete)."""
        return self.file.results

    def extract(self, passages: Mapping[str, str]) -> Extraction:
        self.file.refresh()      # another process may have extracted some meanwhile
        missing = {k: v for k, v in passages.items() if k not in self.results}
        failed = self._run(missing) if missing else {}
        ok = [k for k in passages if k in self.results]
        return Extraction(hyperedges={k: self.results[k].hyperedges() for k in ok}, failed=failed,
                          llm_passages=len(missing))

    def _run(self, passages: Mapping[str, str]) -> dict[str, str]:
        """Ask the LLM for ``passages`` batch by batch, saving as results come; returns the failures."""
        logger.info("extracting n-ary facts from %d passage(s) with %s", len(passages), self.llm_name)
        llm = self._llm()
        if self._prompt is None:
            self._prompt = load_nary_prompt()
        ids = list(passages)
        step = max(1, int(getattr(llm, "max_concurrency", 1) or 1))
        failed: dict[str, str] = {}
        stats = {"segments": 0, "dropped": 0, "truncated": 0}
        saver = _Saver(self.file)
        bar = self.progress.bar(total=len(ids), desc="n-ary facts")
        try:
            for start in range(0, len(ids), step):
                batch = {i: passages[i] for i in ids[start:start + step]}
                new = False
                for i, out in self._ask(llm, batch).items():
                    if isinstance(out, str):
                        failed[i] = out
                        continue
                    self.results[i] = out
                    stats["segments"] += len(out.segments)
                    stats["dropped"] += out.dropped
                    stats["truncated"] += out.truncated
                    new = True
                if new:
                    saver.changed()
                bar.update(len(batch))
        finally:
            bar.close()
            saver.save()
        logger.info("n-ary facts: %d segment(s) from %d passage(s); %d item(s) dropped, %d reply(ies) cut off, "
                    "%d passage(s) failed", stats["segments"], len(ids) - len(failed), stats["dropped"],
                    stats["truncated"], len(failed))
        if stats["truncated"]:
            logger.warning("%d n-ary reply(ies) were cut off (max_new_tokens=%s); their last segments are lost",
                           stats["truncated"], self.max_new_tokens)
        return failed

    def _ask(self, llm: LLMClient, batch: Mapping[str, str]) -> dict[str, NaryResult | str]:
        """One call per passage, a second (with a format reminder) for replies that cannot be read.
        Returns a result or an error message per passage."""
        out: dict[str, NaryResult | str] = {}
        errors: dict[str, str] = {}
        last: dict[str, str] = {}   # the latest unusable reply per passage
        todo = dict(batch)
        for attempt in (0, 1):
            if not todo:
                break
            replies = llm.generate_many([nary_messages(p, self._prompt, retry=attempt > 0) for p in todo.values()],
                                        max_new_tokens=self.max_new_tokens, show_progress=False,
                                        desc="n-ary facts")
            again: dict[str, str] = {}
            for (i, passage), r in zip(todo.items(), replies, strict=True):
                if not isinstance(r, LLMResponse):
                    out[i] = f"n-ary facts: {r}" if isinstance(r, LLMError) else f"n-ary facts: no reply ({r!r})"
                    continue
                parsed = parse_nary(r.text, cut_off=r.finish_reason == "length")
                if parsed.ok:
                    out[i] = NaryResult(i, passage, parsed.segments, parsed.dropped, parsed.truncated)
                    continue
                note = " (cut off at max_new_tokens)" if r.finish_reason == "length" else ""
                note += " (from the LLM cache)" if r.cached else ""
                errors[i] = errors.get(i, "") + ("; retry: " if attempt else "") + f"{parsed.error}{note}"
                last[i] = r.text
                llm.discard(r)   # never kept as an answer: a rerun asks the model again
                again[i] = passage
            todo = again
        for i in todo:
            out[i] = f"n-ary facts: {unparseable_reason(last[i])} ({errors[i]})"
        return out


__all__ = ["NaryEntity", "NaryExtractor", "NaryParse", "NaryResult", "NarySegment", "load_nary_file",
           "load_nary_prompt", "nary_messages", "parse_nary", "save_nary_file"]
