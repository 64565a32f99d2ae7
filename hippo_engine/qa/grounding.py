"""Keeping a reader's answer to what its passages say (small models need it).

Two failures seen with the packaged 0.5B reader: it answers with the worked example's answer
(found in no passage it was shown), and, without an ``Answer:`` line, it pastes a whole passage
back or writes on for hundreds of words. :func:`cut_answer` cuts an over-long answer down to its
first line, sentence or a short name before a clause, and gives no answer (with a note) where only
a cut inside a sentence would make it short: a fragment is never an answer.
:func:`capped_inside_answer` tells a reply the token cap stopped before its answer line ended.
:func:`example_leak` tells an answer that occurs in the prompt's worked example but in none of the
shown passages (or context), which the reader then rejects. All only compare normalised text.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from hippo_engine.qa.citations import strip_citations

#: an answer longer than this (in words) is cut at a whole unit, or rejected
MAX_ANSWER_WORDS = 12
#: a head before a clause mark this short is taken as the answer ("Fail2ban, which ...")
SHORT_HEAD_WORDS = 5
_ANSWER_MARK = re.compile(r"answer\s*[*_]*\s*:", re.IGNORECASE)
_PASSAGE_HEAD = re.compile(r"^\s*(?:\[\d+\]\s*)?(?:wikipedia\s+title\s*:\s*)?", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[^\s.][^\s.])\.\s+(?=[A-Z0-9\"'(])")
_CLAUSE_END = re.compile(r"\s*(?:[,;:]|\s-\s|\s–\s|\bwhich\b|\bwho\b|\bbecause\b)\s*")
_WORD = re.compile(r"\w+")
_TRAILING_INITIALS = re.compile(r"(?:\b[A-Za-z]\.){2,}$")


def normalise(text: str) -> str:
    """Lower-case words (accents removed) joined by single spaces, padded with one space each side."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    return " " + " ".join(_WORD.findall(folded)) + " "


def _words(text: str) -> int:
    return len(text.split())


def _sentence_head(text: str) -> str | None:
    """The first sentence of ``text`` when it ends at a sentence mark before more text, else None."""
    parts = _SENTENCE_END.split(text, maxsplit=1)
    return parts[0].strip() if len(parts) == 2 else None


def _short_head(text: str) -> str | None:
    """The words before ``text``'s first clause mark (comma, semicolon, dash, "which", "who",
    "because") when they are at most ``SHORT_HEAD_WORDS``: a name followed by what it is."""
    parts = _CLAUSE_END.split(text, maxsplit=1)
    head = parts[0].strip()
    return head if len(parts) == 2 and head and _words(head) <= SHORT_HEAD_WORDS else None


def cut_answer(answer: str, max_words: int = MAX_ANSWER_WORDS, *,
               marked: bool = True) -> tuple[str, str | None]:
    """``(answer, note)``: the answer without citation markers or a pasted passage heading, and at
    most ``max_words`` words, never a fragment.

    An over-long answer (or one of several lines) is cut only at a whole unit: its first non-empty
    line, else its first whole sentence, else a short head before a clause mark
    (``"Fail2ban, which scans log files"`` gives ``Fail2ban``), the first that is short enough.
    When none is, the answer is ``""`` and the note says why (a cut inside a sentence would leave a
    fragment such as "The passage on tmate says it provides"). ``marked``: whether the reply had an
    ``Answer:`` line; without one only a short first line (a pasted passage's title) is taken, since
    the reply's first sentence is reasoning, not an answer. ``note`` starts with ``cut:`` or
    ``rejected:`` (None when the answer was kept whole).
    """
    text = _PASSAGE_HEAD.sub("", strip_citations(answer or "")).strip()
    if "\n" not in text and text.endswith(".") and not _TRAILING_INITIALS.search(text):
        text = text[:-1].rstrip()       # "Answer: jq. [2]", "jq [2].": the period around a citation
    n = _words(text)
    lines_given = len([ln for ln in text.splitlines() if ln.strip()])
    if n <= max_words and lines_given <= 1:
        return text, None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    limit = max_words if marked else SHORT_HEAD_WORDS
    units = [("line", first)] + ([("sentence", _sentence_head(first)), ("words before a clause", _short_head(first))]
                                 if marked else [])
    for unit, candidate in units:
        if candidate and _words(candidate) <= limit:
            cut = candidate.rstrip(" .,;:")
            return cut, f"cut: answer of {n} words cut to {_words(cut)} (its first {unit})"
    why = ("the reply has no Answer line and does not begin with a short answer" if not marked else
           f"no whole line, sentence or short name of at most {max_words} words begins it")
    return "", f"rejected: an answer of {n} words, {why}; cutting it would leave a fragment"


def needs_follow_up(text: str) -> bool:
    """Whether a reply has no ``Answer:`` line and no short answer of its own (it would give ``""``):
    the reader then asks once more for the answer line alone."""
    if _ANSWER_MARK.search(text or ""):
        return False
    return not cut_answer(text or "", marked=False)[0]


def capped_inside_answer(text: str, finish_reason: str | None) -> bool:
    """Whether a reply stopped by the token cap (``finish_reason == "length"``) was cut inside its
    answer: no line ends after its last ``Answer:`` mark, or it has no such mark at all."""
    if finish_reason != "length":
        return False
    marks = list(_ANSWER_MARK.finditer(text or ""))
    return not marks or "\n" not in text[marks[-1].end():].strip()


def example_leak(answer: str, shown: Iterable[str], example_texts: Iterable[str]) -> bool:
    """True when ``answer`` occurs (as whole words) in a worked example's text but in none of the
    ``shown`` texts (passages or context) the reader got for this question."""
    norm = normalise(answer)
    if not norm.strip():
        return False
    if not any(norm in normalise(t) for t in example_texts):
        return False
    return not any(norm in normalise(t) for t in shown)
