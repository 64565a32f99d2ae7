"""Keeping a reader's answer to what its passages say (small models need it).

Two failures seen with the packaged 0.5B reader: it answers with the worked example's answer
(found in no passage it was shown), and, without an ``Answer:`` line, it pastes a whole passage
back. :func:`cut_answer` cuts an over-long answer down to its first line, sentence or clause;
:func:`example_leak` tells an answer that occurs in the prompt's worked example but in none of the
shown passages (or context), which the reader then rejects. Both only compare normalised text.
"""
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from hippo_engine.qa.citations import strip_citations

#: an answer longer than this (in words) is cut
MAX_ANSWER_WORDS = 12
_PASSAGE_HEAD = re.compile(r"^\s*(?:\[\d+\]\s*)?(?:wikipedia\s+title\s*:\s*)?", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[^\s.][^\s.])\.\s+(?=[A-Z0-9\"'(])")
_CLAUSE_END = re.compile(r"\s*(?:[,;:]|\s-\s|\s–\s|\bwhich\b|\bwho\b|\bbecause\b)\s*")
_WORD = re.compile(r"\w+")


def normalise(text: str) -> str:
    """Lower-case words (accents removed) joined by single spaces, padded with one space each side."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    return " " + " ".join(_WORD.findall(folded)) + " "


def _words(text: str) -> int:
    return len(text.split())


def cut_answer(answer: str, max_words: int = MAX_ANSWER_WORDS) -> tuple[str, str | None]:
    """``(answer, note)``: the answer without citation markers or a pasted passage heading, cut to
    its first non-empty line, then its first sentence, then its first clause, then its first
    ``max_words`` words, each step only while it is longer than ``max_words`` words; ``note`` says
    how it was cut (None when it was not)."""
    text = strip_citations(answer or "")
    text = _PASSAGE_HEAD.sub("", text).strip()
    n = _words(text)
    if n <= max_words:
        return text, None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    text = lines[0] if lines else ""
    for splitter in (_SENTENCE_END, _CLAUSE_END):
        if _words(text) > max_words:
            text = splitter.split(text, maxsplit=1)[0].strip()
    if _words(text) > max_words:
        text = " ".join(text.split()[:max_words])
    text = text.rstrip(" .,;:")
    return text, f"answer of {n} words cut to {_words(text)}"


def example_leak(answer: str, shown: Iterable[str], example_texts: Iterable[str]) -> bool:
    """True when ``answer`` occurs (as whole words) in a worked example's text but in none of the
    ``shown`` texts (passages or context) the reader got for this question."""
    norm = normalise(answer)
    if not norm.strip():
        return False
    if not any(norm in normalise(t) for t in example_texts):
        return False
    return not any(norm in normalise(t) for t in shown)
