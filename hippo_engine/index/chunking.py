"""Documents to passages: validation, de-duplication and optional token chunking (off by
default, as in the paper)."""
from __future__ import annotations

import logging
from collections.abc import Sequence

from hippo_engine.ids import chunk_id
from hippo_engine.inputs import check_documents

logger = logging.getLogger(__name__)


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


def document_passages(docs: Sequence[str], what: str, chunk_size: int | None, chunk_overlap: int,
                      tokenizer=None) -> dict[str, str]:
    """Validate documents and turn them into ``{chunk_id: passage}``: one passage per document
    (or its chunks with ``chunk_size``), identical passages collapsed, blank documents skipped
    with a warning. ``what`` names the calling method in errors."""
    check_documents(docs, what)
    blank = [i for i, d in enumerate(docs) if not d.strip()]
    if blank:
        logger.warning("%s(): skipping %d empty or whitespace-only document(s) at positions %s",
                       what, len(blank), blank[:10])
    out: dict[str, str] = {}
    for d in docs:
        if not d.strip():
            continue
        for p in (chunk_text(d, chunk_size, chunk_overlap, tokenizer) if chunk_size else [d]):
            out.setdefault(chunk_id(p), p)
    dup = sum(1 for d in docs if d.strip()) - len(out) if not chunk_size else 0
    if dup > 0:
        logger.info("%s(): %d duplicate document(s) collapsed", what, dup)
    return out
