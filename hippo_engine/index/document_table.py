"""The documents an index holds, as its store keeps them: :class:`DocumentTable` (the index state's
``documents``) and :class:`DocumentPlan` (how a batch of documents compares with the stored ones).

The table reads and writes the rows ``doc id -> [passage ids in order]`` of the index store (an
``IndexStore``); what the rows mean, and how indexing and deleting change them, is told in
:mod:`.documents`. The writer (:class:`.writer.IndexWriter`) plans and writes its changes through
this table inside its transaction; nothing here imports the writer.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from hippo_engine.ids import legacy_document_id, legacy_passage_id


@dataclass
class DocumentPlan:
    """How a batch of documents compares with the stored ones: ids ``added`` (new), ``replaced``
    (stored with other passages), ``unchanged``; ``writes`` are the rows to put (new, replaced
    and legacy documents getting their rows), ``stale`` the replaced documents' old passages."""

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    writes: dict[str, list[str]] = field(default_factory=dict)
    stale: set[str] = field(default_factory=set)

    def report(self) -> dict:
        """The ``documents`` part of an index report."""
        return {"added": list(self.added), "replaced": list(self.replaced), "unchanged": len(self.unchanged)}


class DocumentTable:
    """Documents and their passages in the index store ``db`` (an ``IndexStore``): what is
    stored, how a batch compares with it, the rows a change writes (inside the change's
    transaction: :class:`.writer.IndexWriter`)."""

    def __init__(self, db):
        self.db = db
        self._staged: dict[str, dict] = {}

    @contextmanager
    def staging(self, metadata: Mapping[str, dict]) -> Iterator[None]:
        """Within: ``write_documents`` (inside a change's transaction) also writes ``metadata``
        (doc id -> its new metadata), so the rows and the metadata commit together."""
        self._staged = dict(metadata)
        try:
            yield
        finally:
            self._staged = {}

    def metadata_changes(self, metadata: Mapping[str, dict]) -> dict[str, dict]:
        """Those of ``metadata`` (doc id -> metadata) that differ from what is stored."""
        stored = self.db.document_metadata(metadata)
        return {d: m for d, m in metadata.items() if stored.get(d, {}) != m}

    def metadata_of(self, doc_ids: Sequence[str]) -> dict[str, dict]:
        """doc id -> its metadata (``{}`` for none) for each of ``doc_ids`` in the index; unknown ids
        are left out."""
        known = self.stored_documents(doc_ids)[0]
        stored = self.db.document_metadata([d for d in doc_ids if d in known])
        return {d: stored.get(d, {}) for d in doc_ids if d in known}

    def stored_documents(self, doc_ids: Iterable[str]) -> tuple[dict[str, list[str]], set[str]]:
        """doc id -> its stored passage ids for the known ``doc_ids``, and which of them are
        legacy documents (a passage without document rows, see :func:`legacy_document_id`)."""
        doc_ids = list(dict.fromkeys(doc_ids))
        found = self.db.document_passages(doc_ids)
        maybe = {d: legacy_passage_id(d) for d in doc_ids if d not in found}
        maybe = {d: p for d, p in maybe.items() if p is not None and self.db.has_passage(p)}
        held = self.db.passage_documents(maybe.values())
        legacy = {d for d, p in maybe.items() if p not in held}
        found.update({d: [maybe[d]] for d in legacy})
        return found, legacy

    def document_plan(self, documents: Mapping[str, Sequence[str]]) -> DocumentPlan:
        """Compare ``documents`` (doc id -> passage ids) with what is stored."""
        stored, legacy = self.stored_documents(documents)
        plan = DocumentPlan()
        for d, pids in documents.items():
            old = stored.get(d)
            if old is None:
                plan.added.append(d)
            elif list(old) == list(pids):
                plan.unchanged.append(d)
            else:
                plan.replaced.append(d)
                plan.stale.update(set(old).difference(pids))
            if old is None or d in legacy or list(old) != list(pids):
                plan.writes[d] = list(pids)
        new_pids = {p for pids in documents.values() for p in pids}
        plan.stale -= new_pids
        return plan

    def write_documents(self, writes: Mapping[str, Sequence[str]]) -> None:
        """Put the document rows, after checking that each of their passages is stored."""
        missing = [p for d in writes for p in writes[d] if not self.db.has_passage(p)]
        if missing:
            raise ValueError(f"documents refer to passages that are not stored: {missing[:5]}")
        if writes:
            self.db.put_documents(writes)
        staged, self._staged = self._staged, {}
        if staged:
            self.db.put_document_metadata(staged)

    def resolve_texts(self, texts: Sequence[tuple[str, list[str]]]) -> tuple[list[str], set[str], list[int]]:
        """Doc ids for texts: the derived id if stored, else the documents whose passages are
        exactly the text's; else the text's stored passages without document rows (legacy)."""
        ids: list[str] = []
        loose: set[str] = set()
        unknown: list[int] = []
        for i, (derived, pids) in enumerate(texts):
            if derived in self.stored_documents([derived])[0]:
                ids.append(derived)
                continue
            holders = self.db.passage_documents(pids[:1]).get(pids[0], []) if pids else []
            same = [d for d, ps in self.db.document_passages(holders).items() if ps == pids]
            if same:
                ids.extend(same)
                continue
            present = [p for p in pids if self.db.has_passage(p)]
            bare = set(present) - set(self.db.passage_documents(present))
            if bare:
                loose.update(bare)
            else:
                unknown.append(i)
        return ids, loose, unknown

    def unheld(self, pids: Iterable[str]) -> set[str]:
        """Those of ``pids`` that no stored document holds (call after writing the rows)."""
        pids = set(pids)
        return pids - set(self.db.passage_documents(pids))

    def documents_of(self, pids: Sequence[str]) -> list[list[str]]:
        """For each passage id, the ids of the documents holding it (a passage without document
        rows: its legacy id)."""
        held = self.db.passage_documents(pids)
        return [held.get(p) or [legacy_document_id(p)] for p in pids]

    def all_documents(self) -> dict[str, list[str]]:
        """Every document id with its passage ids (legacy passages included)."""
        pids = self.db.passage_ids()
        held = self.db.passage_documents(pids)
        out = self.db.document_passages({d for ds in held.values() for d in ds})
        out.update({legacy_document_id(p): [p] for p in pids if p not in held})
        return out


__all__ = ["DocumentPlan", "DocumentTable"]
