"""Hard-wrapped text to the lines a sentence splitter should see.

Plain text is often wrapped by hand or by a tool at 70-80 columns (package descriptions, e-mail,
man pages, licences): a line break there is only a space inside a sentence. The ``ner`` extractor
treats every line break as a sentence boundary (a passage's title line must stay a sentence of its
own), so wrapped text would give facts that stop mid-sentence at the end of a line.
:func:`join_wrapped_lines` turns each such break into one space before the passage is parsed and
keeps the breaks that mean something. A break stays a boundary when:

- a blank line, or a line with no letter or digit (``"."`` of Debian descriptions, ``"--"``,
  ``"***"``), is on either side of it (a paragraph or a separator);
- the next line starts a list item (``-``, ``*``, ``•``, ``+``, ``1.``, ``2)``, ``a)``, ``(iv)`` ...),
  or the line is in a list item and the next line is not indented deeper than the item's marker
  (the list has ended; a wrapped item's own lines are indented under its text);
- outside a list item, the next line is indented deeper than the line (a block, a quotation or
  the body under a heading starts: a Debian description's text under its one-line summary);
- the line ends with a colon (what follows is a list, a quotation or a block);
- the line or the next is longer than :data:`WRAP_MAX_CHARS` characters (nobody wraps there: such
  a line is a paragraph of its own, the layout of most benchmark passages);
- the line is shorter than half the width of its paragraph's wrapped lines (a heading, a
  salutation, a signature: the writer ended the line on purpose);
- it is the end of the first line and the caller keeps it (the title line of ``"title\\ntext"``).

Only breaks are touched: a text without a soft break is returned unchanged, character for
character, so passages in the one-line-per-paragraph layout are parsed exactly as before.
"""
from __future__ import annotations

import re

#: a line longer than this is not a wrapped line (wrapping widths are 60-100 columns)
WRAP_MAX_CHARS = 100
#: a line shorter than this share of its paragraph's width ended on purpose
SHORT_LINE_SHARE = 0.5

_LIST_ITEM = re.compile(r"\s*(?:[-*•‣◦▪●+–—]|\(?(?:\d{1,3}|[A-Za-z]|[ivxlcIVXLC]{1,5})[.)])\s+\S")
_WORDLIKE = re.compile(r"\w")


def is_list_item(line: str) -> bool:
    """Whether ``line`` starts a list item: a bullet or an enumerator (``1.``, ``a)``, ``(iv)``)
    followed by a space and text."""
    return _LIST_ITEM.match(line) is not None


def is_separator(line: str) -> bool:
    """A blank line or one with no letter or digit (``"."``, ``"--"``, ``"* * *"``)."""
    return _WORDLIKE.search(line) is None


def _indent(line: str) -> int:
    """The number of leading whitespace characters of ``line``."""
    return len(line) - len(line.lstrip())


def _widths(lines: list[str]) -> list[int]:
    """Per line, the width of its paragraph: its longest line of at most :data:`WRAP_MAX_CHARS`
    characters (a paragraph is a run of lines between separators)."""
    out = [0] * len(lines)
    start = 0
    for i in range(len(lines) + 1):
        if i == len(lines) or is_separator(lines[i]):
            width = max((len(x.strip()) for x in lines[start:i] if len(x.strip()) <= WRAP_MAX_CHARS), default=0)
            out[start:i] = [width] * (i - start)
            start = i + 1
    return out


def is_soft_break(line: str, following: str, width: int, item: int | None = None) -> bool:
    """Whether the break between ``line`` and ``following`` is a space inside a sentence (see the
    module's rules; ``width`` is the paragraph's, from the wrapped lines; ``item`` the column of the
    open list item's marker, None outside a list item)."""
    if is_separator(line) or is_separator(following) or is_list_item(following):
        return False
    deeper = _indent(following) > (item if item is not None else _indent(line))
    if deeper != (item is not None):
        return False
    text = line.strip()
    if text.endswith(":") or len(text) > WRAP_MAX_CHARS or len(following.strip()) > WRAP_MAX_CHARS:
        return False
    return len(text) >= SHORT_LINE_SHARE * width


def first_break_is_soft(text: str) -> bool:
    """Whether ``text``'s first line break is a space inside a sentence by the module's rules."""
    lines = text.split("\n", 2)
    if len(lines) < 2:
        return False
    item = _indent(lines[0]) if is_list_item(lines[0]) else None
    return is_soft_break(lines[0], lines[1], _widths(text.split("\n"))[0], item)


def join_wrapped_lines(text: str, *, keep_first: bool = False) -> str:
    """``text`` with each soft line break (and the spaces around it) made one space; every other
    character as it was. ``keep_first`` keeps the first line break (a title line)."""
    if "\n" not in text:
        return text
    lines = text.split("\n")
    widths = _widths(lines)
    out = [lines[0]]
    item = _indent(lines[0]) if is_list_item(lines[0]) else None    # the open list item's marker column
    for i in range(1, len(lines)):
        prev, line = lines[i - 1], lines[i]
        soft = (i > 1 or not keep_first) and is_soft_break(prev, line, widths[i - 1], item)
        if soft:
            out[-1] = out[-1].rstrip() + " " + line.lstrip()
        else:
            out.append(line)
            item = _indent(line) if is_list_item(line) else None
    return "\n".join(out)


__all__ = ["SHORT_LINE_SHARE", "WRAP_MAX_CHARS", "first_break_is_soft", "is_list_item", "is_separator", "is_soft_break",
           "join_wrapped_lines"]
