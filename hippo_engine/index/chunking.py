"""Optional token chunking of documents (off by default, as in the paper)."""
from __future__ import annotations


def chunk_text(text: str, size: int, overlap: int = 0, tokenizer=None) -> list[str]:
    """Split ``text`` into windows of ``size`` tokens overlapping by ``overlap``.

    With a ``transformers`` fast tokenizer the windows are cut at its token offsets (so the
    pieces are exact substrings of ``text``); without one, whitespace-separated words count
    as tokens. A text that fits in one window is returned whole.
    """
    if size <= 0 or overlap < 0 or overlap >= size:
        raise ValueError("need size > 0 and 0 <= overlap < size")
    spans: list[tuple[int, int]] | None = None
    if tokenizer is not None:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        spans = [tuple(o) for o in enc["offset_mapping"]]
    if spans is None:
        import re
        spans = [m.span() for m in re.finditer(r"\S+", text)]
    if len(spans) <= size:
        return [text]
    out = []
    step = size - overlap
    for start in range(0, len(spans), step):
        window = spans[start:start + size]
        out.append(text[window[0][0]:window[-1][1]])
        if start + size >= len(spans):
            break
    return out
