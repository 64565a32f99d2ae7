"""Citations in a reader's reply: which of the numbered passages it says it used.

The citing reader prompt shows passages as ``[1] ...``, ``[2] ...``; a reply names them as
``[1]``, ``[1, 3]``, ``[1][2]``, ``[1-3]``, ``(2)``, ``passage 2`` / ``Passage [2]``, or by the
passage id itself (``chunk-<md5>``). :func:`parse_citations` maps what it finds to the ids of the
passages that were shown, in the order first cited, and counts the references that point at no
shown passage. It only matches regular expressions on the text: it never evaluates model text and
never raises on any string.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

#: ``[1]``, ``[1, 3]``, ``[1 and 2]``, ``[2-4]``, optionally with a word inside: ``[Passage 2]``
_BRACKETS = re.compile(r"\[\s*(?:passages?|sources?|doc(?:ument)?s?)?\s*#?"
                       r"(\d{1,4}(?:\s*(?:,|;|and|&|-|–|to)\s*#?\d{1,4})*)\s*\]", re.IGNORECASE)
#: ``(2)``, ``(1, 3)``: small numbers only, so a year such as ``(1871)`` is not read as a citation
_PARENS = re.compile(r"\(\s*(\d{1,2}(?:\s*(?:,|;|and|&)\s*\d{1,2})*)\s*\)")
#: ``passage 2``, ``Passage #3``, ``passages 1 and 4``
_WORDS = re.compile(r"\bpassages?\s*#?\s*(\d{1,4}(?:\s*(?:,|and|&)\s*\d{1,4})*)\b", re.IGNORECASE)
#: an engine passage id
_IDS = re.compile(r"\bchunk-[0-9a-f]{32}\b")
_NUMBER = re.compile(r"\d+")
_RANGE = re.compile(r"(\d+)\s*(?:-|–|to)\s*(\d+)")
#: a range longer than this is not a citation (``[1-1000]``); it counts as one invalid reference
MAX_RANGE = 20


@dataclass
class Citations:
    """What a reply cites: ``ids`` of shown passages (first-cited order, no repeats), ``invalid``
    the number of references to no shown passage (a number out of range, an unknown id)."""

    ids: list[str] = field(default_factory=list)
    invalid: int = 0


def _numbers(group: str) -> list[int | None]:
    """The numbers a citation group names; a range expands (``None`` for an over-long range)."""
    out: list[int | None] = []
    rest = group
    for m in _RANGE.finditer(group):
        lo, hi = int(m.group(1)), int(m.group(2))
        out.extend(range(lo, hi + 1) if 0 <= hi - lo <= MAX_RANGE else [None])
        rest = rest.replace(m.group(0), " ", 1)
    out.extend(int(n) for n in _NUMBER.findall(rest))
    return out


def _references(text: str) -> list[tuple[int, int | str | None]]:
    """Every reference in ``text`` as ``(position, number | id | None)``, in text order."""
    found: list[tuple[int, int | str | None]] = []
    spans: list[tuple[int, int]] = []
    for pattern in (_BRACKETS, _WORDS, _PARENS):
        for m in pattern.finditer(text):
            if any(a <= m.start() < b for a, b in spans):   # "Passage [2]": counted once
                continue
            spans.append(m.span())
            found.extend((m.start(), n) for n in _numbers(m.group(1)))
    found.extend((m.start(), m.group(0)) for m in _IDS.finditer(text))
    return sorted(found, key=lambda x: x[0])


def parse_citations(text: object, shown_ids: Sequence[str]) -> Citations:
    """The passages ``text`` cites among ``shown_ids`` (passage ``n`` is ``shown_ids[n - 1]``).

    Anything that is not a string gives no citation. Repeated citations are kept once."""
    result = Citations()
    if not isinstance(text, str) or not text:
        return result
    shown = list(shown_ids)
    known = set(shown)
    for _, ref in _references(text):
        if isinstance(ref, int) and 1 <= ref <= len(shown):
            pid = shown[ref - 1]
        elif isinstance(ref, str) and ref in known:
            pid = ref
        else:
            result.invalid += 1
            continue
        if pid not in result.ids:
            result.ids.append(pid)
    return result


def strip_citations(text: str) -> str:
    """``text`` without bracketed citation markers and passage ids (``Paris [1]`` -> ``Paris``)."""
    out = _IDS.sub("", _BRACKETS.sub("", text))
    return re.sub(r"[ \t]{2,}", " ", re.sub(r"\s+([.,;:])", r"\1", out)).strip()
