"""Checks of what callers hand the facade, at the door: each error names the argument and the
item (its position in the list), never a failure deep inside hashing, numpy or the encoder. (The
command line's corpus, query and id file readers are in :mod:`hippo_engine.cli.inputs`.)"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hippo_engine.datatypes import Document, passage_text
from hippo_engine.ids import document_id
from hippo_engine.metadata_check import MAX_METADATA_BYTES, MAX_METADATA_DEPTH, check_metadata_item

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


# ----------------------------------------------------------------------------- documents as records
#: limits of one document given as a record ``{id?, text, title?, metadata?}`` (the service's queue; its
#: HTTP and MCP doors publish the same in their schemas)
MAX_ID_CHARS = 512
MAX_TITLE_CHARS = 2048
#: text with a character that is not white space, and no NUL (which the index cannot store); the character
#: class excludes NUL itself (``\S`` alone matches NUL, which let one through)
TEXT_PATTERN = r"^[^\x00]*[^\s\x00][^\x00]*$"
#: a record's id: a character that is not white space, no control characters (NUL included)
ID_PATTERN = r"^[^\x00-\x1f]*[^\s\x00-\x1f][^\x00-\x1f]*$"
#: a title: one line, no NUL
TITLE_PATTERN = r"^[^\x00\n]*$"
#: what each pattern means: the message wherever a document breaks it (a client is told this, not the expression)
RULES = {TEXT_PATTERN: "must hold a character that is not white space, and no NUL character (\\x00)",
         ID_PATTERN: "must be an id with a character that is not white space and no control characters "
                     "(NUL, newline, ...)",
         TITLE_PATTERN: "must be one line without NUL characters (\\x00)"}
#: the fields of a document record
RECORD_FIELDS = ("id", "text", "title", "metadata")


def check_document_records(docs: object) -> list[Document]:
    """Validate a batch of document records ``{"id"?, "text", "title"?, "metadata"?}`` (dicts or
    :class:`~hippo_engine.datatypes.Document`) as one :class:`Document` each (``ValueError`` naming the first
    bad one, ``documents[i].field``, and what is wrong; nothing is accepted then). Ids default to
    :func:`hippo_engine.ids.document_id` of the indexed text; an id given twice in one batch is an error."""
    if not isinstance(docs, list | tuple) or not docs:
        raise ValueError("documents: give a non-empty list of {id?, text, title?, metadata?} objects")
    out: list[Document] = []
    seen: dict[str, int] = {}
    for i, d in enumerate(docs):
        doc = check_document_record(d, f"documents[{i}]")
        if doc.id in seen:
            raise ValueError(f"documents[{i}]: id {doc.id!r} is also documents[{seen[doc.id]}]'s id; ids must be "
                             "unique within a batch")
        seen[doc.id] = i
        out.append(doc)
    return out


def check_document_record(d: object, where: str) -> Document:
    """One document record (a dict or a :class:`Document`) checked, as a :class:`Document` with its id (derived
    from the indexed text when none is given); errors start with ``where`` (``documents[3]``)."""
    if isinstance(d, Document):
        d = {k: v for k, v in vars(d).items() if v is not None}
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object {{id?, text, title?, metadata?}}, got {type(d).__name__}")
    unknown = sorted(set(d) - set(RECORD_FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; a document has {', '.join(RECORD_FIELDS)}")
    text = _record_text(d.get("text"), f"{where}.text", TEXT_PATTERN, None)
    title = d.get("title")
    if title is not None:
        title = _record_text(title, f"{where}.title", TITLE_PATTERN, MAX_TITLE_CHARS)
    metadata = d.get("metadata")
    if metadata is not None:
        metadata = check_document_metadata(metadata, f"{where}.metadata")
    doc_id = d.get("id")
    if doc_id is None:
        doc_id = document_id(passage_text(title or None, text))
    else:
        doc_id = _record_text(doc_id, f"{where}.id", ID_PATTERN, MAX_ID_CHARS)
    return Document(doc_id, text, title or None, metadata)


def _record_text(value: object, at: str, pattern: str, most: int | None) -> str:
    """A record's string field: a string, at most ``most`` characters, matching ``pattern`` (else a
    ``ValueError`` saying so in :data:`RULES`' words)."""
    if not isinstance(value, str):
        raise ValueError(f"{at}: must be text (a string)")
    if most is not None and len(value) > most:
        raise ValueError(f"{at}: {len(value):,} characters long; the limit is {most:,}")
    if re.fullmatch(pattern, value) is None:
        raise ValueError(f"{at}: {RULES[pattern]}")
    return value


def check_document_metadata(metadata: object, at: str) -> dict:
    """A document's metadata as the engine stores it (:func:`hippo_engine.metadata_check.check_metadata_item`:
    JSON, string keys, no NUL, nested at most :data:`MAX_METADATA_DEPTH` deep, at most
    :data:`MAX_METADATA_BYTES` of JSON), checked at the door so that metadata the index would refuse later is
    never accepted (on either backend); a detached copy. The depth is measured first, without recursion, so
    the message of one nested too deep stays short. ``ValueError`` messages start with ``at``."""
    if not isinstance(metadata, dict):
        raise ValueError(f"{at} must be an object (string keys), got {type(metadata).__name__}")
    if nesting(metadata, MAX_METADATA_DEPTH + 1) > MAX_METADATA_DEPTH:
        raise ValueError(f"{at}: nested more than {MAX_METADATA_DEPTH} levels deep (at most {MAX_METADATA_DEPTH})")
    return check_metadata_item(metadata, at)


def nesting(value: object, stop: int) -> int:
    """How deep the values inside ``value`` (objects and lists) go: 0 for a scalar or an empty container, 1
    for ``{"a": 1}``; counting stops at ``stop``. No recursion (a value from a parser may be very deep)."""
    deepest, stack = 0, [(value, 0)]
    while stack and deepest < stop:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list | tuple) else ()
        for child in children:
            deepest = max(deepest, depth + 1)
            stack.append((child, depth + 1))
    return deepest


__all__ = ["ID_PATTERN", "MAX_ID_BYTES", "MAX_ID_CHARS", "MAX_METADATA_BYTES", "MAX_METADATA_DEPTH",
           "MAX_TITLE_CHARS", "RECORD_FIELDS", "RULES", "TEXT_PATTERN", "TITLE_PATTERN", "check_document_ids",
           "check_document_metadata", "check_document_record", "check_document_records", "check_documents",
           "check_id_storable", "check_queries", "check_text_items", "nesting", "positive_count", "surrogate_at"]
