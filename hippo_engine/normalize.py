"""Normalisation of entity phrases (pure functions of the standard library)."""
from __future__ import annotations

import re
import unicodedata

_REFERENCE_NON_ALNUM = re.compile(r"[^a-z0-9 ]")
_SPACES = re.compile(r"\s+")
_ALNUM_ANY = re.compile(r"[^\W_]", re.UNICODE)


def normalize_phrase(text: str, mode: str = "unicode") -> str:
    """Normalise an entity phrase.

    ``"reference"``: lowercase, every character outside ``[a-z0-9 ]`` becomes a space, strip
    (HippoRAG's rule; it maps non-Latin text to the empty string).
    ``"unicode"`` (default): lowercase, keep letters and digits of any script, everything else
    becomes a space, collapse runs of spaces, strip. Marks of scripts such as Devanagari are
    kept with their letters.
    """
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if mode == "reference":
        return _REFERENCE_NON_ALNUM.sub(" ", text.lower()).strip()
    if mode != "unicode":
        raise ValueError(f"unknown normalisation {mode!r}")
    text = unicodedata.normalize("NFC", text).lower()
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] in "LN" or cat in ("Mn", "Mc"):
            out.append(ch)
        else:
            out.append(" ")
    return _SPACES.sub(" ", "".join(out)).strip()


def alnum_count(text: str) -> int:
    """Number of letters/digits (any script) in ``text``."""
    return len(_ALNUM_ANY.findall(text))
