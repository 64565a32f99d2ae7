"""What the command line reads: corpora (a folder of ``.txt``/``.md`` files, a text file, JSON, JSONL
or CSV), query files and id files. Every error names the file (and the line or item).

Corpus formats:

* a folder: each ``.txt``/``.md`` file under it (recursively, hidden ones skipped) is one document,
  its id the file's path relative to the folder (``notes/a.md``), its title the first ``# heading`` of
  a Markdown file or else the file name without its extension;
* a ``.txt``/``.md`` file: one document the same way (id: the file name);
* JSON (a list, or an object with a ``corpus``/``docs``/``data`` list) or JSONL (one item per line):
  strings or ``{"title", "text"}`` records, optionally with ``"id"`` (every record or none) and
  ``"metadata"`` (a JSON object, matched by ``--where`` filters);
* CSV with a header: a ``text`` column, optionally ``title``, ``id`` and ``metadata`` (a JSON
  object); any other column becomes a metadata field (a string; empty cells are left out).

Light to import: the standard library and the engine's light data types only.
"""
from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hippo_engine.datatypes import passage_text

#: file endings read as one plain-text document each
TEXT_SUFFIXES = (".txt", ".md", ".markdown")


@dataclass
class Corpus:
    """Documents read from one or more paths: ``docs`` (``"title\\ntext"``), ``ids`` (None: derived
    from the texts), ``metadata`` (None: none given; an item None: none for that document, a known
    one keeps its stored metadata), ``sources`` (where each came from, for
    messages) and ``skipped`` (empty text files left out)."""

    docs: list[str] = field(default_factory=list)
    ids: list[str] | None = None
    metadata: list[dict | None] | None = None
    sources: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


@dataclass
class _Doc:
    text: str
    source: str
    id: str | None = None
    metadata: dict | None = None


# ----------------------------------------------------------------------------- corpora
def read_corpus_paths(paths: Sequence[str | Path], metadata: dict | None = None) -> Corpus:
    """Documents from each path in turn (folders, text files, JSON, JSONL, CSV; see the module).
    ``metadata``: fields every document gets (its own fields win). Documents without an id get
    the id their text would get (as the engine derives it) when others have ids; two documents
    with one id are an error naming both sources."""
    from hippo_engine.ids import document_id
    out = Corpus()
    found: list[_Doc] = []
    for p in paths:
        found.extend(_read_path(Path(p), out.skipped))
    out.docs = [d.text for d in found]
    out.sources = [d.source for d in found]
    if any(d.id is not None for d in found):
        out.ids = [d.id if d.id is not None else document_id(d.text) for d in found]
        seen: dict[str, str] = {}
        for d, did in zip(found, out.ids, strict=True):
            if did in seen:
                raise ValueError(f"{d.source}: id {did!r} is also the id of {seen[did]}; document ids must be unique")
            seen[did] = d.source
    if metadata or any(d.metadata is not None for d in found):
        # None: the document brings none and no common fields are given, so what is stored stays
        out.metadata = [{**(metadata or {}), **d.metadata} if d.metadata is not None else metadata or None
                        for d in found]
    return out


def _read_path(path: Path, skipped: list[str]) -> list[_Doc]:
    if path.is_dir():
        return _read_folder(path, skipped)
    if not path.exists():
        raise FileNotFoundError(f"file not found: {path}")
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        doc = _text_document(path, path.name)
        if doc is None:
            skipped.append(str(path))
        return [doc] if doc else []
    if suffix == ".csv":
        return list(_csv_documents(path))
    return list(_json_documents(path))


def _read_folder(folder: Path, skipped: list[str]) -> list[_Doc]:
    files = sorted(p for p in folder.rglob("*")
                   if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
                   and not any(part.startswith(".") for part in p.relative_to(folder).parts))
    if not files:
        raise ValueError(f"{folder}: no .txt or .md files in this folder (JSON, JSONL and CSV corpora are given "
                         f"as files)")
    out = []
    for f in files:
        doc = _text_document(f, f.relative_to(folder).as_posix())
        if doc is None:
            skipped.append(str(f))
        else:
            out.append(doc)
    return out


def _text(path: Path) -> str:
    """A file's text as UTF-8 (a byte-order mark is dropped); errors name the file."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise OSError(f"{path}: cannot read ({e.strerror or e})") from None


def _text_document(path: Path, doc_id: str) -> _Doc | None:
    """One document of a text file (None when it is blank): ``"title\\nbody"`` with the first
    ``# heading`` of Markdown as the title, else the file name without its extension."""
    text = _text(path).strip()
    if not text:
        return None
    title = path.stem.replace("_", " ").strip() or path.name
    if path.suffix.lower() != ".txt":
        first, _, rest = text.partition("\n")
        if first.startswith("#") and first.lstrip("#").strip() and rest.strip():
            title, text = first.lstrip("#").strip(), rest.strip()
    return _Doc(passage_text(title, text), str(path), doc_id)


def _record(item: Any, where: str) -> _Doc:
    """A corpus item (a string or a ``{title, text, id, metadata}`` record) as a document."""
    if isinstance(item, str):
        return _Doc(item, where)
    if not isinstance(item, dict) or not isinstance(item.get("text"), str):
        raise ValueError(f"{where} is neither a string nor a {{'title','text'}} record")
    title = item.get("title")
    text = passage_text(title if isinstance(title, str) and title else None, item["text"])
    meta = item.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise ValueError(f"{where}: 'metadata' must be a JSON object, got {type(meta).__name__}")
    return _Doc(text, where, _record_id(item, where), meta)


def _json_documents(path: Path) -> list[_Doc]:
    docs = [_record(it, f"{path}: item {n}") for n, it in enumerate(_read_items(path))]
    given = [n for n, d in enumerate(docs) if d.id is not None]
    if given and len(given) < len(docs):
        first = next(n for n, d in enumerate(docs) if d.id is None)
        raise ValueError(f"{path}: item {first} has no 'id' but item {given[0]} has one; give every "
                         f"document an id or none")
    return docs


def _csv_documents(path: Path) -> Iterator[_Doc]:
    text = _text(path)
    old = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)      # a document may be long
    try:
        reader = csv.DictReader(text.splitlines(keepends=True))
        if reader.fieldnames is None or "text" not in reader.fieldnames:
            raise ValueError(f"{path}: a CSV corpus needs a header with a 'text' column (found: "
                             f"{', '.join(reader.fieldnames or []) or 'no header'})")
        extra = [c for c in reader.fieldnames if c not in ("text", "title", "id", "metadata") and c]
        for row in _csv_rows(reader, path):
            where = f"{path}, line {reader.line_num}"
            meta = _csv_metadata(row.get("metadata"), where)
            meta.update({c: row[c] for c in extra if row.get(c)})
            rid = row.get("id") or None
            yield _Doc(passage_text(row.get("title") or None, row["text"] or ""), where, rid,
                       meta or None)
    finally:
        csv.field_size_limit(old)


def _csv_rows(reader: csv.DictReader, path: Path) -> Iterator[dict]:
    try:
        for row in reader:
            if None in row:
                raise ValueError(f"{path}, line {reader.line_num}: more cells than the header has columns")
            yield row
    except csv.Error as e:
        raise ValueError(f"{path}, line {reader.line_num}: not valid CSV ({e})") from None


def _csv_metadata(cell: str | None, where: str) -> dict:
    if not cell:
        return {}
    try:
        meta = json.loads(cell)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: the 'metadata' cell is not valid JSON ({e.msg})") from None
    if not isinstance(meta, dict):
        raise ValueError(f"{where}: the 'metadata' cell must be a JSON object")
    return meta


def read_documents(path: str | Path) -> tuple[list[str], list[str] | None]:
    """Documents and their ids from one path (see :func:`read_corpus_paths`); ids are None when
    no document has one."""
    c = read_corpus_paths([path])
    return c.docs, c.ids


def read_corpus(path: str | Path) -> list[str]:
    """The documents of one path (see :func:`read_corpus_paths`)."""
    return read_documents(path)[0]


def _record_id(record: dict, where: str) -> str | None:
    """A record's ``"id"`` as a string (whole numbers accepted), None without one."""
    did = record.get("id")
    if did is None or isinstance(did, str):
        return did
    if isinstance(did, int) and not isinstance(did, bool):
        return str(did)
    raise ValueError(f"{where} has an 'id' that is neither a string nor a whole number: {did!r}")


# ----------------------------------------------------------------------------- ids and queries
def read_ids(path: str | Path) -> list[str]:
    """Document ids from a file: a JSON/JSONL list of ids or of records with an ``"id"``, or any
    other file as text, one id per line (blank lines skipped)."""
    path = Path(path)
    if path.suffix not in (".json", ".jsonl"):
        if not path.exists():
            raise FileNotFoundError(f"file not found: {path}")
        return [line.strip() for line in _text(path).splitlines() if line.strip()]
    out = []
    for n, it in enumerate(_read_items(path)):
        did = _record_id(it, f"{path}: item {n}") if isinstance(it, dict) else it if isinstance(it, str) else None
        if did is None:
            raise ValueError(f"{path}: item {n} is neither an id string nor a record with an 'id'")
        out.append(did)
    return out


def read_queries(path: str | Path) -> tuple[list[str], list | None, list | None]:
    """Queries from a ``.txt`` file (one per line) or JSON/JSONL: strings, or records with
    ``question`` (and optionally ``answers``/``answer``+``answer_aliases`` and ``gold_docs``, or
    MuSiQue-style ``paragraphs`` with ``is_supporting``). Returns (questions, gold_docs, gold_answers)."""
    path = Path(path)
    if path.suffix.lower() == ".txt":
        if not path.exists():
            raise FileNotFoundError(f"file not found: {path}")
        return [line.strip() for line in _text(path).splitlines() if line.strip()], None, None
    qs: list[str] = []
    gd: list[list | None] = []
    ga: list[list | None] = []
    for n, it in enumerate(_read_items(path)):
        question = it if isinstance(it, str) else it.get("question") if isinstance(it, dict) else None
        if isinstance(question, str) and not question.strip():
            raise ValueError(f"{path}: item {n}: the question is empty")
        if isinstance(it, str):
            qs.append(it)
            gd.append(None)
            ga.append(None)
            continue
        if not isinstance(it, dict) or not isinstance(it.get("question"), str):
            raise ValueError(f"{path}: item {n} has no 'question' string")
        qs.append(it["question"])
        gd.append(_gold_docs(it, f"{path}: item {n}"))
        ga.append(list(it["answers"]) if "answers" in it else
                  [it["answer"], *it.get("answer_aliases", [])] if "answer" in it else None)
    gold_docs = gd if gd and all(g is not None for g in gd) else None
    gold_answers = ga if ga and all(g is not None for g in ga) else None
    return qs, gold_docs, gold_answers


def _gold_docs(item: dict, where: str) -> list | None:
    """A record's gold documents: ``gold_docs`` (a list of passage texts, document ids or document texts;
    one string is one document), or MuSiQue-style supporting ``paragraphs``."""
    if "gold_docs" in item:
        gold = item["gold_docs"]
        gold = [gold] if isinstance(gold, str) else gold
        if not isinstance(gold, list) or not all(isinstance(g, str) and g.strip() for g in gold):
            raise ValueError(f"{where}: 'gold_docs' must be a list of document ids or texts (non-empty strings)")
        return list(gold)
    if "paragraphs" in item:
        return [passage_text(p["title"], p.get("paragraph_text", p.get("text", "")))
                for p in item["paragraphs"] if p.get("is_supporting", True)]
    return None


def _read_items(path: str | Path) -> list[Any]:
    """The items of a JSON list (or of an object's ``corpus``/``docs``/``questions``/``data`` list)
    or of a JSONL file (one per line)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"file not found: {path}")
    text = _text(path)
    if path.suffix.lower() == ".jsonl":
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
        hint = (" (a corpus is a folder of .txt/.md files, a .txt/.md file, a JSON list of strings or {title, text} "
                "records, JSONL (one per line) or CSV with a 'text' column)"
                if path.suffix.lower() != ".json" else "")
        raise ValueError(f"{path}, line {e.lineno}, column {e.colno}: not valid JSON ({e.msg}){hint}") from None
    if isinstance(data, dict):
        for key in ("corpus", "docs", "questions", "data"):
            if isinstance(data.get(key), list):
                return data[key]
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list (or JSONL)")
    return data


__all__ = ["TEXT_SUFFIXES", "Corpus", "read_corpus", "read_corpus_paths", "read_documents", "read_ids",
           "read_queries"]
