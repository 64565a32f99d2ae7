"""What the ingestion queue is made of: accepted documents (:class:`NewDocument`, the engine's ``Document``,
checked by the engine's :func:`hippo_engine.inputs.check_document_records`), the identity of a claim's owner
(:class:`Owner`, :func:`owner_alive`) and how stored rows read (:func:`shown_status`, :func:`job_view`,
:func:`shown_metadata`).

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

from hippo_engine.datatypes import Document, passage_text
from hippo_engine.inputs import (
    MAX_ID_CHARS,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_TITLE_CHARS,
    check_document_metadata,
    check_document_records,
    nesting,
)
from hippo_engine.lenient_json import json_depth

PENDING, PROCESSING, INDEXED, FAILED, DELETED = "pending", "processing", "indexed", "failed", "deleted"
REPLACED = "replaced"
#: the statuses a document row can hold
STORED = (PENDING, PROCESSING, INDEXED, FAILED, DELETED)
#: the statuses ``documents(status=...)`` filters by
LISTED = (PENDING, PROCESSING, INDEXED, FAILED)
#: one accepted document (the engine's :class:`~hippo_engine.datatypes.Document`)
NewDocument = Document


def indexed_text(text: str, title: str | None) -> str:
    """The text the index holds for a document: ``"title\\ntext"`` with a title, else the text
    (:func:`hippo_engine.datatypes.passage_text`)."""
    return passage_text(title or None, text)


#: the engine's checks of document records and of their metadata, as the queue has always named them
check_documents = check_document_records
check_metadata = check_document_metadata


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


__all__ = ["DELETED", "FAILED", "INDEXED", "LISTED", "MAX_ID_CHARS", "MAX_METADATA_BYTES", "MAX_METADATA_DEPTH",
           "MAX_TITLE_CHARS", "PENDING",
           "PROCESSING", "REPLACED", "STORED", "NewDocument", "Owner", "check_documents", "check_metadata",
           "indexed_text", "iso", "job_view", "nesting", "now", "owner_alive", "shown_metadata", "shown_status"]
