"""Documents to passages: a long document is cut into passages of at most ``chunk_size`` tokens.

The default ``chunk_size`` (see :class:`~hippo_engine.config.IndexConfig`) leaves paragraph-sized
documents whole (every passage of the benchmark corpora) and cuts long ones (a book, a report)
into many passages. ``chunk_size=None`` never cuts (the paper's setup).

Cuts fall, in order of preference, after a sentence or at a line break in the second half of a
window, else between words, else between tokens. A document whose first line reads as a title
(``"title\\ntext"``, the engine's passage convention) gives that title to each of its passages, so
every piece still names its document (the first line is what the graph and the command line treat
as a passage's title).
"""
from __future__ import annotations

import re

from hippo_engine.datatypes import passage_text

#: a first line longer than this is text, not a title
TITLE_MAX_CHARS = 200
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*$")
_WORD = re.compile(r"\S+")


def _spans(text: str, tokenizer) -> list[tuple[int, int]]:
    """Character spans of ``text``'s tokens: a ``transformers`` fast tokenizer's offsets, or
    whitespace-separated words without one."""
    if tokenizer is not None:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        spans = [(int(s), int(e)) for s, e in enc["offset_mapping"] if e > s]
        if spans or not text.strip():
            return spans
    return [m.span() for m in _WORD.finditer(text)]


def _cut(text: str, spans: list[tuple[int, int]], start: int, size: int) -> int:
    """Where the window of ``size`` tokens from token ``start`` ends (exclusive): after the last
    sentence end or line break in its second half, else at the last gap between words (a token
    that is a whole word or ends one), else after ``size`` tokens."""
    end = start + size
    if end >= len(spans):
        return len(spans)
    word_gap = None
    for i in range(end, start + max(1, size // 2), -1):     # the boundary between token i-1 and token i
        gap = text[spans[i - 1][1]:spans[i][0]]
        if not gap:
            continue                                         # inside a word
        if "\n" in gap or _SENTENCE_END.search(text[spans[i - 1][0]:spans[i - 1][1]]):
            return i
        word_gap = word_gap or i
    if word_gap is not None:
        return word_gap
    for i in range(end, start, -1):                          # a long word or no whitespace: any gap
        if text[spans[i - 1][1]:spans[i][0]]:
            return i
    return end


def chunk_text(text: str, size: int, overlap: int = 0, tokenizer=None) -> list[str]:
    """Split ``text`` into windows of at most ``size`` tokens, each starting ``overlap`` tokens
    before the previous one ended, cut at sentence, line or word boundaries where possible (see
    :func:`_cut`). The pieces are exact substrings of ``text``.

    With a ``transformers`` fast tokenizer its tokens are counted (the encoder's word pieces);
    without one, whitespace-separated words. A text that fits in one window is returned whole,
    without tokenizing it when its UTF-8 length alone shows it fits (no tokenizer makes more
    tokens than bytes).
    """
    if size <= 0 or overlap < 0 or overlap >= size:
        raise ValueError("need size > 0 and 0 <= overlap < size")
    if len(text.encode("utf-8")) <= size:
        return [text]
    spans = _spans(text, tokenizer)
    if len(spans) <= size:
        return [text]
    out = []
    start = 0
    while start < len(spans):
        end = _cut(text, spans, start, size)
        out.append(text[spans[start][0]:spans[end - 1][1]])
        if end >= len(spans):
            break
        start = max(end - overlap, start + 1)
    return out


def split_title(text: str) -> tuple[str | None, str]:
    """``(title, body)`` when ``text``'s first line reads as a title (non-blank, at most
    :data:`TITLE_MAX_CHARS` characters, followed by more text), else ``(None, text)``."""
    first, sep, rest = text.partition("\n")
    if sep and first.strip() and len(first) <= TITLE_MAX_CHARS and rest.strip():
        return first, rest
    return None, text


def document_chunks(text: str, size: int | None, overlap: int = 0, tokenizer=None) -> list[str]:
    """A document's passages: itself when ``size`` is None or it fits in ``size`` tokens; else its
    body cut by :func:`chunk_text`, each piece after its title line when the document has one
    (:func:`split_title`), so a passage holds at most ``size`` tokens of text plus that line."""
    if size is None:
        return [text]
    pieces = chunk_text(text, size, overlap, tokenizer)
    if len(pieces) == 1:
        return pieces
    title, body = split_title(text)
    if title is None:
        return pieces
    return [passage_text(title, p) for p in chunk_text(body, size, overlap, tokenizer)]


__all__ = ["TITLE_MAX_CHARS", "chunk_text", "document_chunks", "split_title"]
