"""What the ingestion queue is made of: accepted documents (:func:`check_documents`; their metadata checked as
the engine checks it, :func:`check_metadata`), the identity of a claim's owner (:class:`Owner`,
:func:`owner_alive`) and how stored rows read (:func:`shown_status`, :func:`job_view`, :func:`shown_metadata`).

A document's stored ``status`` is one of :data:`STORED`: ``pending`` (waiting), ``processing`` (claimed by a
worker, whose ``owner`` is recorded), ``indexed``, ``failed`` (with its error) or ``deleted`` (a tombstone:
deleted by id, its text dropped). Each accepted version of a document has a revision (``rev``, bumped when the
same id is added again); a job lists the (document, revision) pairs it accepted, so a job whose document was
added again later shows it ``replaced`` and one deleted since shows it ``deleted``.
"""
from __future__ import annotations

import json
import math
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from hippo_engine.ids import document_id
from hippo_engine.lenient_json import json_depth
from hippo_engine.store.metadata import MAX_METADATA_BYTES, MAX_METADATA_DEPTH, check_metadata_item

PENDING, PROCESSING, INDEXED, FAILED, DELETED = "pending", "processing", "indexed", "failed", "deleted"
REPLACED = "replaced"
#: the statuses a document row can hold
STORED = (PENDING, PROCESSING, INDEXED, FAILED, DELETED)
#: the statuses ``documents(status=...)`` filters by
LISTED = (PENDING, PROCESSING, INDEXED, FAILED)
#: limits of one accepted document (its metadata: the engine's, hippo_engine/store/metadata.py)
MAX_ID_CHARS = 512
MAX_TITLE_CHARS = 2048


@dataclass(frozen=True)
class NewDocument:
    """One accepted document: its ``id``, ``text``, ``title`` (or None), ``metadata`` (a JSON object, maybe
    empty; None where the request gave none: the index keeps what it holds for a known id) and
    ``indexed_text``, what the index receives (``"title\\ntext"`` with a title, as corpora of ``{title, text}``
    records are read)."""

    id: str
    text: str
    title: str | None
    metadata: dict | None

    @property
    def indexed_text(self) -> str:
        return indexed_text(self.text, self.title)


def indexed_text(text: str, title: str | None) -> str:
    """The text the index holds for a document: ``"title\\ntext"`` with a title, else the text."""
    return f"{title}\n{text}" if title else text


def check_documents(docs: object) -> list[NewDocument]:
    """Validate a batch of documents ``{"id"?, "text", "title"?, "metadata"?}`` (ValueError naming the
    first bad one and what is wrong; nothing is accepted then). Ids default to
    :func:`hippo_engine.ids.document_id` of the indexed text; an id given twice in one batch is an error."""
    if not isinstance(docs, list | tuple) or not docs:
        raise ValueError("documents: give a non-empty list of {id?, text, title?, metadata?} objects")
    out: list[NewDocument] = []
    seen: dict[str, int] = {}
    for i, d in enumerate(docs):
        doc = _check_one(d, i)
        if doc.id in seen:
            raise ValueError(f"documents[{i}]: id {doc.id!r} is also documents[{seen[doc.id]}]'s id; ids must be "
                             "unique within a batch")
        seen[doc.id] = i
        out.append(doc)
    return out


def _check_one(d: object, i: int) -> NewDocument:
    where = f"documents[{i}]"
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object {{id?, text, title?, metadata?}}, got {type(d).__name__}")
    unknown = sorted(set(d) - {"id", "text", "title", "metadata"})
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {unknown}; a document has id, text, title, metadata")
    text = d.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}: 'text' must be a non-empty string")
    title = d.get("title")
    if title is not None and (not isinstance(title, str) or len(title) > MAX_TITLE_CHARS or "\n" in title):
        raise ValueError(f"{where}: 'title' must be a string of one line, at most {MAX_TITLE_CHARS} characters")
    for name, value in (("text", text), ("title", title)):
        if value and "\x00" in value:
            raise ValueError(f"{where}: '{name}' contains a NUL character (\\x00), which the index cannot store")
    metadata = _check_metadata(d.get("metadata"), where)
    doc_id = d.get("id")
    full = indexed_text(text, title or None)
    if doc_id is None:
        doc_id = document_id(full)
    elif not isinstance(doc_id, str) or not doc_id.strip() or len(doc_id) > MAX_ID_CHARS or \
            any(ord(c) < 32 for c in doc_id):
        raise ValueError(f"{where}: 'id' must be a non-empty string of at most {MAX_ID_CHARS} characters without "
                         "control characters")
    return NewDocument(doc_id, text, title or None, metadata)


def _check_metadata(metadata: object, where: str) -> dict | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise ValueError(f"{where}: 'metadata' must be an object (string keys), got {type(metadata).__name__}")
    return check_metadata(metadata, f"{where}.metadata")


def check_metadata(metadata: object, at: str) -> dict:
    """A document's metadata as the engine checks it (:func:`hippo_engine.store.metadata.check_metadata_item`:
    JSON, string keys, no NUL, nested at most :data:`MAX_METADATA_DEPTH` deep, at most
    :data:`MAX_METADATA_BYTES` of JSON), checked at the door so that metadata the index would refuse later
    is never accepted (on either backend); a detached copy. The depth is measured first, without
    recursion, so the message of one nested too deep stays short. ``ValueError`` messages start with ``at``."""
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


# ---------------------------------------------------------------------------------------- claim owners
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except OSError:
        return "unknown-boot"


def _start_ticks(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot; None: no such process or unknown)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    try:
        return stat.rsplit(")", 1)[1].split()[19]
    except IndexError:
        return None


@dataclass(frozen=True)
class Owner:
    """Who holds a claim: host, boot id, pid and the process's start time, as one string
    ``host/boot/pid/start`` (a pid reused after a restart or a reboot is another owner)."""

    host: str
    boot: str
    pid: int
    start: str

    @classmethod
    def current(cls) -> Owner:
        pid = os.getpid()
        return cls(socket.gethostname(), _boot_id(), pid, _start_ticks(pid) or "0")

    def __str__(self) -> str:
        return f"{self.host}/{self.boot}/{self.pid}/{self.start}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        parts = text.rsplit("/", 3)
        if len(parts) != 4 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3])


def owner_alive(owner: str, me: Owner | None = None) -> bool:
    """Whether the claim owner ``owner`` may still be running. On this host: the process exists with the
    same start time since the same boot. An owner on another host is taken to be alive (its claims are
    reset by a restart on its host); an unparsable owner is dead."""
    me = me or Owner.current()
    o = Owner.parse(owner)
    if o is None:
        return False
    if o.host != me.host:
        return True
    if o.boot != me.boot:
        return False
    return _start_ticks(o.pid) == o.start


# ---------------------------------------------------------------------------------------- views
def iso(ts: float | None) -> str | None:
    """An epoch time as ISO 8601 UTC (None stays None)."""
    if ts is None or (isinstance(ts, float) and math.isnan(ts)):
        return None
    return datetime.fromtimestamp(float(ts), timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def shown_status(status: str, rev: int, claimed_rev: int | None) -> str:
    """How a stored status reads: a document added again while an older version of it was being indexed
    is ``pending`` (the new version waits for the claim on the old one to end)."""
    if status == PROCESSING and claimed_rev is not None and claimed_rev != rev:
        return PENDING
    return status


def job_view(job_id: str, created: float, items: Sequence[tuple]) -> dict:
    """A job as the API shows it, from its items ``(doc_id, item rev, row rev or None, row status,
    claimed_rev, error, row updated)`` in the order accepted."""
    docs, counts = [], dict.fromkeys((PENDING, PROCESSING, INDEXED, FAILED, DELETED, REPLACED), 0)
    updated = created
    for doc_id, rev, row_rev, status, claimed_rev, error, row_updated in items:
        if row_rev is None or status == DELETED:
            shown, err = DELETED, None
        elif row_rev != rev:
            shown, err = REPLACED, None
        else:
            shown, err = shown_status(status, row_rev, claimed_rev), error
            updated = max(updated, row_updated or created)
        counts[shown] += 1
        docs.append({"id": doc_id, "status": shown, "error": err if shown == FAILED else None})
    left = counts[PENDING] + counts[PROCESSING]
    if left:
        status = PROCESSING if counts[PROCESSING] or left < len(docs) else PENDING
    else:
        status = FAILED if counts[FAILED] else "done"
    progress = {"total": len(docs), **{k: counts[k] for k in (PENDING, PROCESSING, INDEXED, FAILED)}}
    progress.update({k: counts[k] for k in (DELETED, REPLACED) if counts[k]})
    return {"job_id": job_id, "status": status, "created": iso(created), "updated": iso(updated),
            "progress": progress, "documents": docs}


def shown_metadata(text: str | None) -> dict:
    """A listing's ``metadata`` from its stored JSON: ``{}`` for none. Metadata nested deeper than the
    engine's limit (stored by an older version, which did not check the depth at the door) is shown as
    ``None`` with a ``metadata_note`` saying why, so that it never breaks a listing (parsing and sending it
    would fail from a few hundred levels on)."""
    if not text:
        return {"metadata": {}}
    depth = json_depth(text)
    if depth > MAX_METADATA_DEPTH + 1:          # + 1: the top object itself
        return {"metadata": None,
                "metadata_note": f"the stored metadata nests {depth} levels deep, more than the limit of "
                                 f"{MAX_METADATA_DEPTH}: not shown (add the document again with other metadata, or "
                                 "{} to clear it)"}
    return {"metadata": json.loads(text)}


def now() -> float:
    return time.time()


__all__ = ["DELETED", "FAILED", "INDEXED", "LISTED", "MAX_METADATA_BYTES", "MAX_METADATA_DEPTH", "PENDING",
           "PROCESSING", "REPLACED", "STORED", "NewDocument", "Owner", "check_documents", "check_metadata",
           "indexed_text", "iso", "job_view", "nesting", "now", "owner_alive", "shown_metadata", "shown_status"]
