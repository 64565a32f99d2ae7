"""Open information extraction: NER, then triples, per passage (HippoRAG 2 offline indexing).

Results persist in the reference implementation's OpenIE file format::

    {"docs": [{"idx": <passage id>, "passage": str, "extracted_entities": [str],
               "extracted_triples": [[s, p, o]]}], "avg_ent_chars": float, "avg_ent_words": float}

Files in the older HippoRAG v1 format (docs with ``passage``/``title``/``text``, no ``idx``,
bare ``NaN`` values) load too. Model output is parsed as JSON (with repair of truncated
output); it is never evaluated as code.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hippo_engine.datatypes import Triple, passage_text
from hippo_engine.ids import CHUNK_PREFIX, chunk_id
from hippo_engine.lenient_json import parse_json_lenient
from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse, unparseable_reason
from hippo_engine.progress import QUIET, Progress
from hippo_engine.prompts import load_prompt
from hippo_engine.system import atomic_write_text

logger = logging.getLogger(__name__)



class OpenIEError(RuntimeError):
    """Some passages could not be processed (the LLM failed); ``failed`` maps id -> reason."""

    def __init__(self, message: str, failed: Mapping[str, str]):
        super().__init__(message)
        self.failed = dict(failed)


@dataclass
class OpenIEResult:
    idx: str
    passage: str
    entities: list[str] = field(default_factory=list)
    triples: list[Triple] = field(default_factory=list)
    usage: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"idx": self.idx, "passage": self.passage, "extracted_entities": list(self.entities),
                "extracted_triples": [list(t) for t in self.triples]}


# ------------------------------------------------------------------ cleaning model output
def clean_entities(raw: Any) -> list[str]:
    """Keep string entities, stripped, non-empty, first occurrence order, no duplicates."""
    if not isinstance(raw, list):
        return []
    seen: set[str] = set()
    out = []
    for e in raw:
        if isinstance(e, str):
            e = e.strip()
            if e and e not in seen:
                seen.add(e)
                out.append(e)
    return out


def clean_triples(raw: Any) -> list[Triple]:
    """Keep triples with exactly three non-empty string parts; drop duplicates (order kept)."""
    if not isinstance(raw, list):
        return []
    seen: set[Triple] = set()
    out: list[Triple] = []
    for t in raw:
        if not isinstance(t, (list, tuple)) or len(t) != 3:
            continue
        if not all(isinstance(x, str) and x.strip() for x in t):
            continue
        trip = (t[0].strip(), t[1].strip(), t[2].strip())
        if trip not in seen:
            seen.add(trip)
            out.append(trip)
    return out


def read_ner(text: str) -> list[str]:
    """Entities from a NER reply (a list, or an object with ``named_entities``/``entities``).
    Raises ``ValueError`` when no entity list can be read; an empty list is a valid answer."""
    value = parse_json_lenient(text)
    if isinstance(value, dict):
        if "named_entities" not in value and "entities" not in value:
            raise ValueError("the NER reply is an object without 'named_entities'")
        value = value.get("named_entities", value.get("entities"))
    if not isinstance(value, list):
        raise ValueError("the NER reply has no list of entities")
    return clean_entities(value)


def read_triples(text: str) -> list[Triple]:
    """Triples from a triple-extraction reply (a list, or an object with ``triples``). Raises
    ``ValueError`` when no triple list can be read; an empty list is a valid answer."""
    value = parse_json_lenient(text)
    if isinstance(value, dict):
        value = value.get("triples")
    if not isinstance(value, list):
        raise ValueError("the triple reply has no 'triples' list")
    return clean_triples(value)


def parse_ner(text: str) -> list[str]:
    """:func:`read_ner`, but ``[]`` (with a warning) when unreadable."""
    try:
        return read_ner(text)
    except ValueError as e:
        logger.warning("NER output unparseable, no entities kept: %s", e)
        return []


def parse_triples(text: str) -> list[Triple]:
    """:func:`read_triples`, but ``[]`` (with a warning) when unreadable."""
    try:
        return read_triples(text)
    except ValueError as e:
        logger.warning("triple output unparseable, no triples kept: %s", e)
        return []


# ------------------------------------------------------------------ prompts
def _load_json_prompt(name: str) -> dict:
    return json.loads(load_prompt(name))


def _fill(template: str, **values: str) -> str:
    for k, v in values.items():
        template = template.replace("{" + k + "}", v)
    return template


def ner_messages(passage: str, prompt: dict | None = None) -> list[dict]:
    p = prompt or _load_json_prompt("openie_ner.json")
    msgs = [{"role": "system", "content": p["system"]}]
    for ex in p.get("examples", []):
        msgs.append({"role": "user", "content": _fill(p["user_template"], passage=ex["passage"])})
        msgs.append({"role": "assistant", "content": json.dumps(ex["output"], ensure_ascii=False)})
    msgs.append({"role": "user", "content": _fill(p["user_template"], passage=passage)})
    return msgs


def triple_messages(passage: str, entities: Sequence[str], prompt: dict | None = None) -> list[dict]:
    p = prompt or _load_json_prompt("openie_triples.json")
    msgs = [{"role": "system", "content": p["system"]}]
    for ex in p.get("examples", []):
        msgs.append({"role": "user", "content": _fill(
            p["user_template"], passage=ex["passage"],
            named_entities=json.dumps(ex["named_entities"], ensure_ascii=False))})
        msgs.append({"role": "assistant", "content": json.dumps(ex["output"], ensure_ascii=False)})
    msgs.append({"role": "user", "content": _fill(
        p["user_template"], passage=passage, named_entities=json.dumps(list(entities), ensure_ascii=False))})
    return msgs


# ------------------------------------------------------------------ extraction
class OpenIE:
    """Runs NER then triple extraction over passages with an ``LLMClient``."""

    def __init__(self, llm: LLMClient, *, max_new_tokens: int | None = None, progress: Progress = QUIET):
        self.llm = llm
        self.max_new_tokens = max_new_tokens
        self.progress = progress
        self._ner_prompt = _load_json_prompt("openie_ner.json")
        self._triple_prompt = _load_json_prompt("openie_triples.json")

    def run(self, passages: Mapping[str, str]) -> tuple[dict[str, OpenIEResult], dict[str, str]]:
        """Extract for ``{chunk_id: passage}``. Returns (results, failed) where ``failed``
        maps the ids whose LLM calls failed, or whose replies could not be read, to the
        reason; those have no result, and their unreadable replies are discarded from the LLM
        cache (a rerun asks again)."""
        ids = list(passages)
        failed: dict[str, str] = {}
        if not ids:
            return {}, failed
        ner_out = self.llm.generate_many(
            [ner_messages(passages[i], self._ner_prompt) for i in ids],
            max_new_tokens=self.max_new_tokens, show_progress=self.progress.show, desc="OpenIE NER")
        entities: dict[str, list[str]] = {}
        usage: dict[str, dict] = {}
        for i, r in zip(ids, ner_out, strict=True):
            got = self._read(i, r, read_ner, "NER", failed)
            if got is not None and isinstance(r, LLMResponse):   # read: a reply, not an error
                entities[i], usage[i] = got, _usage(r)
        todo = [i for i in ids if i in entities]
        tri_out = self.llm.generate_many(
            [triple_messages(passages[i], entities[i], self._triple_prompt) for i in todo],
            max_new_tokens=self.max_new_tokens, show_progress=self.progress.show, desc="OpenIE triples")
        results: dict[str, OpenIEResult] = {}
        for i, r in zip(todo, tri_out, strict=True):
            triples = self._read(i, r, read_triples, "triples", failed)
            if triples is None or not isinstance(r, LLMResponse):
                continue
            u = _usage(r)
            total = {k: usage[i].get(k, 0) + u.get(k, 0) for k in u}
            results[i] = OpenIEResult(i, passages[i], entities[i], triples, total)
        return results, failed

    def _read(self, idx: str, r: Any, read: Callable[[str], Any], stage: str, failed: dict[str, str]) -> Any:
        """``read(r.text)``, or None with ``failed[idx]`` set when the call failed or its reply
        cannot be read (then the reply is discarded from the cache)."""
        if not isinstance(r, LLMResponse):
            failed[idx] = f"{stage}: {r}" if isinstance(r, LLMError) else f"{stage}: no reply ({r!r})"
            return None
        try:
            return read(r.text)
        except ValueError as e:
            logger.warning("OpenIE %s reply for %s unreadable (%s); the passage is retried on the next run",
                           stage, idx, e)
            self.llm.discard(r)
            failed[idx] = f"{stage}: {unparseable_reason(r.text)}"
            return None


def _usage(r: LLMResponse) -> dict:
    return {"prompt_tokens": r.prompt_tokens, "completion_tokens": r.completion_tokens,
            "cached": int(r.cached)}


# ------------------------------------------------------------------ the file format
def load_openie_file(path: str | os.PathLike) -> dict[str, OpenIEResult]:
    """Load an OpenIE file in the reference format or the HippoRAG v1 format.

    A passage's id is always computed as :func:`~hippo_engine.ids.chunk_id` of ``passage`` (or of
    ``title + "\\n" + text`` when ``passage`` is missing; v1 docs have no ``idx``, other tools'
    ids are ignored); an entry whose passage id is another passage's is skipped with a warning
    (its facts would attach to that passage). ``NaN`` and other non-string values are dropped.
    """
    path = Path(path)
    data = _read_openie_json(path)
    docs = data.get("docs") if isinstance(data, dict) else data
    if not isinstance(docs, list):
        raise ValueError(f"OpenIE file {path}: expected an object with a 'docs' list")
    out: dict[str, OpenIEResult] = {}
    mismatched: list[int] = []
    for n, d in enumerate(docs):
        if not isinstance(d, dict):
            raise ValueError(f"OpenIE file {path}: docs[{n}] is not an object")
        passage = d.get("passage")
        if not isinstance(passage, str):
            title, text = d.get("title"), d.get("text")
            if isinstance(title, str) and isinstance(text, str):
                passage = passage_text(title, text)
            else:
                raise ValueError(f"OpenIE file {path}: docs[{n}] has no passage text")
        entities, triples = clean_entities(d.get("extracted_entities")), clean_triples(d.get("extracted_triples"))
        for what, text in [("passage", passage), *(("an entity", e) for e in entities),
                           *(("a triple", x) for t in triples for x in t)]:
            if not _is_unicode(text):
                raise ValueError(f"OpenIE file {path}: docs[{n}] has {what} with a lone surrogate "
                                 f"({text[:60]!r}): not valid Unicode text")
        idx = chunk_id(passage)   # the id is derived, never trusted: facts stay with their text
        given = d.get("idx")
        if isinstance(given, str) and given.startswith(CHUNK_PREFIX) and given != idx:
            mismatched.append(n)
            continue
        out[idx] = OpenIEResult(idx, passage, entities, triples)
    if mismatched:
        logger.warning("OpenIE file %s: %d entr%s skipped because 'idx' is not the id of the passage "
                       "(docs%s)", path, len(mismatched), "y" if len(mismatched) == 1 else "ies", mismatched[:10])
    return out


def _read_openie_json(path: Path) -> Any:
    """The parsed JSON of an OpenIE file; every way it can be unreadable is a ``ValueError``
    (or ``FileNotFoundError``) naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)  # accepts bare NaN (v1 files contain it)
    except FileNotFoundError:
        raise FileNotFoundError(f"OpenIE file not found: {path}") from None
    except IsADirectoryError:
        raise ValueError(f"OpenIE file {path} is a directory") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"OpenIE file {path} is not UTF-8 text (byte {e.object[e.start:e.start + 1]!r} at "
                         f"offset {e.start}); save it as UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"OpenIE file {path} is not valid JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"OpenIE file {path}: its JSON nests too deeply to read") from None
    except OSError as e:
        raise ValueError(f"OpenIE file {path} cannot be read: {e.strerror or e}") from None


def _is_unicode(text: str) -> bool:
    """False for text with lone surrogates (from ``\\ud800``-style JSON escapes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def save_openie_file(path: str | os.PathLike, results: Iterable[OpenIEResult]) -> None:
    """Write results atomically (temp file + rename) in the reference format."""
    results = sorted(results, key=lambda r: r.idx)
    ents = [e for r in results for e in r.entities]
    data = {
        "docs": [r.to_json() for r in results],
        "avg_ent_chars": round(sum(len(e) for e in ents) / len(ents), 4) if ents else 0.0,
        "avg_ent_words": round(sum(len(e.split()) for e in ents) / len(ents), 4) if ents else 0.0,
    }
    atomic_write_text(path, json.dumps(data, ensure_ascii=False))
