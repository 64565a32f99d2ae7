"""Checks of what callers hand the facade, at the door: each error names the argument and the
item (its position in the list), never a failure deep inside hashing, numpy or the encoder;
and the readers of the command line's corpus, query and id files."""
from __future__ import annotations

import json
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


# ----------------------------------------------------------------------------- files (the CLI's inputs)
def read_corpus(path: str | Path) -> list[str]:
    """Documents from JSON (a list) or JSONL (one item per line); see :func:`read_documents`."""
    return read_documents(path)[0]


def read_documents(path: str | Path) -> tuple[list[str], list[str] | None]:
    """Documents and their ids from JSON (a list) or JSONL (one item per line). Items are
    strings or ``{"title", "text"}`` records, which become ``"title\\ntext"``; records may carry
    an ``"id"`` (a string or whole number), and then every item must. Ids are None when no
    item has one."""
    docs: list[str] = []
    ids: list[str | None] = []
    for n, it in enumerate(_read_items(path)):
        if isinstance(it, str):
            docs.append(it)
            ids.append(None)
        elif isinstance(it, dict) and isinstance(it.get("text"), str):
            title = it.get("title")
            docs.append(f"{title}\n{it['text']}" if isinstance(title, str) and title else it["text"])
            ids.append(_record_id(it, path, n))
        else:
            raise ValueError(f"{path}: item {n} is neither a string nor a {{'title','text'}} record")
    given = [n for n, d in enumerate(ids) if d is not None]
    if not given:
        return docs, None
    if len(given) < len(ids):
        raise ValueError(f"{path}: item {ids.index(None)} has no 'id' but item {given[0]} has one; give every "
                         f"document an id or none")
    return docs, [i for i in ids if i is not None]


def _record_id(record: dict, path, n: int) -> str | None:
    """A record's ``"id"`` as a string (whole numbers accepted), None without one."""
    did = record.get("id")
    if did is None or isinstance(did, str):
        return did
    if isinstance(did, int) and not isinstance(did, bool):
        return str(did)
    raise ValueError(f"{path}: item {n} has an 'id' that is neither a string nor a whole number: {did!r}")


def read_ids(path: str | Path) -> list[str]:
    """Document ids from a file: a JSON/JSONL list of ids or of records with an ``"id"``, or any
    other file as text, one id per line (blank lines skipped)."""
    path = Path(path)
    if path.suffix not in (".json", ".jsonl"):
        if not path.exists():
            raise FileNotFoundError(f"file not found: {path}")
        return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = []
    for n, it in enumerate(_read_items(path)):
        did = _record_id(it, path, n) if isinstance(it, dict) else it if isinstance(it, str) else None
        if did is None:
            raise ValueError(f"{path}: item {n} is neither an id string nor a record with an 'id'")
        out.append(did)
    return out


def read_queries(path: str | Path) -> tuple[list[str], list | None, list | None]:
    """Queries from JSON/JSONL: strings, or records with ``question`` (and optionally
    ``answers``/``answer``+``answer_aliases`` and ``gold_docs``, or MuSiQue-style
    ``paragraphs`` with ``is_supporting``). Returns (questions, gold_docs, gold_answers)."""
    items = _read_items(path)
    qs: list[str] = []
    gd: list[list | None] = []
    ga: list[list | None] = []
    for n, it in enumerate(items):
        if isinstance(it, str):
            qs.append(it)
            gd.append(None)
            ga.append(None)
            continue
        if not isinstance(it, dict) or not isinstance(it.get("question"), str):
            raise ValueError(f"{path}: item {n} has no 'question' string")
        qs.append(it["question"])
        if "gold_docs" in it:
            gd.append(list(it["gold_docs"]))
        elif "paragraphs" in it:
            gd.append([f"{p['title']}\n{p.get('paragraph_text', p.get('text', ''))}"
                       for p in it["paragraphs"] if p.get("is_supporting", True)])
        else:
            gd.append(None)
        if "answers" in it:
            ga.append(list(it["answers"]))
        elif "answer" in it:
            ga.append([it["answer"], *it.get("answer_aliases", [])])
        else:
            ga.append(None)
    gold_docs = gd if gd and all(g is not None for g in gd) else None
    gold_answers = ga if ga and all(g is not None for g in ga) else None
    return qs, gold_docs, gold_answers


def _read_items(path: str | Path) -> list[Any]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e})") from None
    if path.suffix == ".jsonl":
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}, line {n}: not valid JSON ({e.msg}, column {e.colno})") from None
        return items
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        hint = (" (a corpus is a JSON list of strings or {title, text} records, or JSONL: one per line)"
                if path.suffix not in (".json", ".jsonl") else "")
        raise ValueError(f"{path}, line {e.lineno}, column {e.colno}: not valid JSON ({e.msg}){hint}") from None
    if isinstance(data, dict):
        for key in ("corpus", "docs", "questions", "data"):
            if isinstance(data.get(key), list):
                return data[key]
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list (or JSONL)")
    return data



__all__ = ["MAX_ID_BYTES", "check_document_ids", "check_documents", "check_id_storable", "check_queries",
           "check_text_items", "positive_count", "read_corpus", "read_documents", "read_ids", "read_queries",
           "surrogate_at"]
