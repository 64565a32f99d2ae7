"""JSON repair: tolerant parsing of JSON-like model output (code fences, leading prose,
truncation, the usual malformations), and the one-pass structure scan other parsers share."""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import json_repair

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)(?:```|$)", re.DOTALL)


def json_events(text: str) -> Iterator[tuple[int, str]]:
    """The structure of JSON-like text, one pass, strings skipped: ``(position, event)`` with event
    ``[ { ] } ,`` (outside strings), ``"`` (a string opens) or ``S`` (a string closes)."""
    in_str = esc = False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                yield i, "S"
        elif ch == '"':
            in_str = True
            yield i, '"'
        elif ch in "[{]},":
            yield i, ch


def _close_truncated(s: str) -> str | None:
    """Cut ``s`` after its last complete JSON value inside a container and close what is open:
    remembers the position after the last complete element (a closed string in a list, a closed
    bracket, or a scalar followed by ``,``)."""
    stack: list[str] = []
    last_good = -1  # index after which the text is a prefix ending on a complete element
    good_stack: list[str] = []
    for i, ev in json_events(s):
        if ev == "S":
            if stack and stack[-1] == "[":   # a list element (not an object key) is complete
                last_good, good_stack = i, stack.copy()
        elif ev in "[{":
            stack.append(ev)
        elif ev in "]}":
            if not stack:
                break
            stack.pop()
            last_good, good_stack = i, stack.copy()
            if not stack:
                return s[: i + 1]
        elif ev == "," and stack:
            last_good, good_stack = i - 1, stack.copy()
    if last_good < 0:
        return None
    head = s[: last_good + 1].rstrip().rstrip(",")
    closers = "".join("]" if c == "[" else "}" for c in reversed(good_stack))
    return head + closers


def json_depth(text: str) -> int:
    """The deepest bracket nesting of ``text`` (strings skipped, brackets not matched)."""
    depth = deepest = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"?|[\[{]|[\]}]', text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok in "]}":
            depth = max(depth - 1, 0)
    return deepest


#: model output nested deeper than this is garbage (replies nest a few levels); it is refused
#: before any parser sees it (Python's json recursion would raise RecursionError on it)
MAX_JSON_DEPTH = 64


#: longer replies are not handed to ``json_repair`` (about 4 s at 640k characters of an unterminated
#: string, growing faster than linearly); model replies are a few thousand characters
MAX_REPAIR_CHARS = 100_000


def parse_json_lenient(text: str) -> Any:
    """Parse JSON from model output: code fences, leading prose, truncation and the usual
    malformations tolerated (truncation: cut after the last complete item and close what is
    open; the rest: ``json_repair``).

    Returns the parsed value or raises ``ValueError``. Never evaluates the text as code.
    """
    if text is None:
        raise ValueError("no text")
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"model output nests brackets deeper than {MAX_JSON_DEPTH} levels: not read")
    candidates = []
    m = _FENCE.search(text)
    if m:
        candidates.append(m.group(1))
    candidates.append(text)
    for cand in candidates:
        start = min((p for p in (cand.find("{"), cand.find("[")) if p >= 0), default=-1)
        if start < 0:
            continue
        value = _read_body(cand[start:].strip())
        if value is not _UNREAD:
            return value
    raise ValueError(f"could not parse JSON from model output: {text[:200]!r}")


#: what a reader returns for a text it cannot read (a JSON value may be anything, None included)
_UNREAD = object()


def _read_body(body: str) -> Any:
    """The value of ``body`` (text from its first bracket on), by the first reader that gets one:
    plain JSON, valid JSON followed by trailing chatter, a truncated value closed, ``json_repair``;
    ``_UNREAD`` when none does."""
    for read in (json.loads, _read_prefix, _read_closed):
        try:
            value = read(body)
        except (json.JSONDecodeError, RecursionError):
            continue
        if value is not _UNREAD:
            return value
    return _read_repaired(body)


def _read_prefix(body: str) -> Any:
    """Valid JSON followed by trailing chatter: the value before the chatter."""
    value, _ = json.JSONDecoder().raw_decode(body)
    return value


def _read_closed(body: str) -> Any:
    """A truncated value cut after its last complete item and closed (``_UNREAD``: nothing complete)."""
    repaired = _close_truncated(body)
    return _UNREAD if repaired is None else json.loads(repaired)


def _read_repaired(body: str) -> Any:
    """Other malformations (single quotes, trailing commas, bare keys, comments): ``json_repair``,
    for a non-empty object or list. It runs last because it keeps a truncated final item ("Ca" of
    "Cairo"), which the truncation rule drops; replies longer than ``MAX_REPAIR_CHARS`` skip it
    (it is superlinear on long unterminated strings)."""
    if len(body) > MAX_REPAIR_CHARS:
        return _UNREAD
    try:
        value = json_repair.loads(body)
    except Exception:  # noqa: BLE001 - a third-party parser on arbitrary text: any failure (it has
        return _UNREAD  # tripped its own assert on '{"```json{```') means "cannot be read"
    return value if isinstance(value, (dict, list)) and value else _UNREAD
