"""Checks of what callers hand the facade, at the door: each error names the argument and the
item (its position in the list), never a failure deep inside hashing, numpy or the encoder. (The
command line's corpus, query and id file readers are in :mod:`hippo_engine.cli.inputs`.)"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hippo_engine.config import HippoConfig


def positive_count(value, name: str) -> int | None:
    """A positive whole number of items, or None (the default); anything else is an error
    (``0`` does not mean "everything", ``2.5`` and ``"3"`` are refused)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


def open_save_dir(save_dir, config: HippoConfig | None, storage: str | None, dsn: str | None,
                  overrides: dict[str, Any]) -> tuple[Path, HippoConfig]:
    """``HippoRAG(save_dir, ...)``'s folder (made if missing) and configuration: ``config``
    (default ``HippoConfig()``) with the keyword ``overrides``; ``storage="postgres"`` (an
    embedded server) or ``dsn=`` (a server) choose PostgreSQL, else the backend the folder recorded."""
    from hippo_engine.config import HippoConfig
    config = config or HippoConfig()
    if storage is not None or dsn is not None:
        overrides = {**overrides, "storage_backend": storage or "postgres", "postgres_dsn": dsn}
    if overrides:
        config = config.replace(**overrides)
    if not isinstance(save_dir, (str, Path)) or not str(save_dir):
        raise TypeError(f"HippoRAG(save_dir): a directory path is needed, got {save_dir!r}")
    path = Path(save_dir)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"HippoRAG(save_dir): {path} exists and is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    if "storage_backend" not in overrides:   # the backend the folder recorded
        from hippo_engine.store.opening import with_recorded_backend
        config = with_recorded_backend(path, config)
    return path, config


def surrogate_at(text: str) -> int | None:
    """Position of the first lone surrogate code point in ``text`` (not valid Unicode: it
    cannot be encoded as UTF-8), or None. Such strings come from decoding bytes with
    ``errors="surrogateescape"`` or from broken JSON escapes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


def check_text_items(items: Sequence, what: str, kind: str, one: str, *, allow_blank: bool) -> None:
    """Every item is a string of valid Unicode (and non-blank unless ``allow_blank``).

    ``what`` names the method (``"index"``), ``kind``/``one`` the items (``"documents"``/``"document"``). Raises
    ``TypeError`` for non-strings and ``ValueError`` for blank items or lone surrogates,
    naming the positions."""
    bad = [i for i, d in enumerate(items) if not isinstance(d, str)]
    if bad:
        raise TypeError(f"{what}(): {kind} must be strings; items {bad[:10]} are not")
    if not allow_blank:
        blank = [i for i, d in enumerate(items) if not d.strip()]
        if blank:
            raise ValueError(f"{what}(): {kind} must be non-empty strings; items {blank[:10]} are not")
    for i, d in enumerate(items):
        pos = surrogate_at(d)
        if pos is not None:
            raise ValueError(f"{what}(): {one} {i} contains a lone surrogate "
                             f"(U+{ord(d[pos]):04X}) at character {pos}: not valid Unicode text. Decode the "
                             f"source with errors='replace' (or fix its escapes) before passing it")


def check_queries(queries, what: str) -> list[str]:
    """A list (or tuple) of non-empty query strings of valid Unicode, as a list."""
    if isinstance(queries, str) or not isinstance(queries, (list, tuple)):
        raise TypeError(f"{what}() takes a list of query strings")
    blank = [i for i, q in enumerate(queries) if isinstance(q, str) and not q.strip()]
    if blank:
        which = f"query {blank[0]} is" if len(blank) == 1 else f"queries {', '.join(map(str, blank[:10]))} are"
        raise ValueError(f"{what}(): {which} empty (counting from 0); every query needs some text")
    check_text_items(queries, what, "queries", "query", allow_blank=False)
    return list(queries)


def check_documents(docs, what: str) -> None:
    """A list (or tuple) of document strings of valid Unicode (blank ones are allowed: they
    are skipped with a warning)."""
    if isinstance(docs, str) or not isinstance(docs, (list, tuple)):
        raise TypeError(f"{what}() takes a list of strings, got {type(docs).__name__}")
    check_text_items(docs, what, "documents", "document", allow_blank=True)


#: the longest document id, in UTF-8 bytes (both backends; PostgreSQL's btree rows end near 2,700)
MAX_ID_BYTES = 1024


def check_id_storable(ids: Sequence[str], what: str, arg: str = "ids") -> None:
    """Every id can be stored by every backend: no NUL character and at most
    :data:`MAX_ID_BYTES` UTF-8 bytes. A ``ValueError`` names the item's position."""
    for i, d in enumerate(ids):
        if "\x00" in d:
            raise ValueError(f"{what}(): {arg} item {i} contains a NUL character (\\x00) at position "
                             f"{d.index(chr(0))}; document ids cannot hold NUL")
        size = len(d.encode("utf-8"))
        if size > MAX_ID_BYTES:
            raise ValueError(f"{what}(): {arg} item {i} is {size:,} UTF-8 bytes long (starts {d[:40]!r}); document "
                             f"ids are limited to {MAX_ID_BYTES:,} bytes")


def check_document_ids(ids, n: int | None, what: str, *, arg: str = "ids") -> list[str]:
    """``ids``: a list (or tuple) of ``n`` unique, non-blank strings of valid Unicode, one per
    document (``n=None``: any length), each storable (:func:`check_id_storable`). Errors name the
    argument and the item."""
    if isinstance(ids, str) or not isinstance(ids, (list, tuple)):
        raise TypeError(f"{what}(): {arg} must be a list of strings, got {type(ids).__name__}")
    if n is not None and len(ids) != n:
        raise ValueError(f"{what}(): {arg} has {len(ids)} item(s) but there are {n} document(s); give one id per "
                         f"document")
    check_text_items(ids, what, arg, "id", allow_blank=False)
    check_id_storable(ids, what, arg)
    seen: dict[str, int] = {}
    for i, d in enumerate(ids):
        if d in seen:
            raise ValueError(f"{what}(): {arg} item {i} ({d!r}) repeats item {seen[d]}; document ids must be unique")
        seen[d] = i
    return list(ids)


__all__ = ["MAX_ID_BYTES", "check_document_ids", "check_documents", "check_id_storable", "check_queries",
           "check_text_items", "positive_count", "surrogate_at"]
