"""Document ids: which documents hold which passages.

A document becomes one passage, or several with ``chunk_size``; one passage text may belong to
several documents. Each document has an id: the caller's (``index(docs, ids=[...])``) or one
derived from its text, ``DOC_PREFIX + md5(text)`` (:func:`~hippo_engine.ids.document_id`). The store keeps
``doc id -> [passage ids in order]`` (``IndexStore.put_documents``), written in the same
transaction as the passages, so a crash never leaves passages without their document or the
reverse.

Semantics (:class:`~.document_table.DocumentTable`, the index state's ``documents``; changes:
:class:`.writer.IndexWriter`):

* indexing an id with the passages it already holds is a no-op ("unchanged");
* indexing a known id with another text replaces the document ("replaced"): its new passages are
  added and its old passages that no other document holds are removed, in one transaction;
* deleting ids removes the documents and each of their passages that no remaining document
  holds, so the index equals one where those documents were never added; unknown ids are
  reported, not an error.

Passages indexed before document ids were recorded have no document rows. Each counts as its
own document with the id its text would get, ``DOC_PREFIX + md5(passage text)``: the passage
id with its prefix swapped (:func:`~hippo_engine.ids.legacy_document_id`), found without a scan.
``delete(docs=[text])`` resolves a text to the documents holding exactly its passages (its
derived id first), and, for such old passages, removes them as before.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hippo_engine.config import IndexConfig, StorageConfig
from hippo_engine.ids import chunk_id, document_id, legacy_document_id, legacy_passage_id
from hippo_engine.index.chunking import document_chunks
from hippo_engine.index.document_table import DocumentTable
from hippo_engine.index.openie import OpenIEError
from hippo_engine.index.stopwatch import Stopwatch
from hippo_engine.index.writer import IndexWriter
from hippo_engine.inputs import check_document_ids, check_documents
from hippo_engine.progress import announce, plural
from hippo_engine.store.metadata import check_metadata
from hippo_engine.store.registry import get_backend

logger = logging.getLogger(__name__)

@dataclass
class DocumentBatch:
    """Documents split into passages: ``passages`` (chunk id -> text, each once), ``documents``
    (doc id -> its chunk ids in order), ``positions`` (doc id -> its first position in the
    input), ``skipped`` (positions of blank documents), ``seconds`` (time the split took),
    ``metadata`` (doc id -> its JSON object, when metadata was given)."""

    passages: dict[str, str] = field(default_factory=dict)
    documents: dict[str, list[str]] = field(default_factory=dict)
    positions: dict[str, int] = field(default_factory=dict)
    skipped: list[int] = field(default_factory=list)
    seconds: float = 0.0
    #: doc id -> its metadata (None: none was given, what is stored stays; a document given a None
    #: item is left out, so its stored metadata stays too)
    metadata: dict[str, dict] | None = None

    def take_metadata(self, doc_id: str, meta: dict | None, pos: int, what: str) -> None:
        """Record ``meta`` (None: none given) for ``doc_id`` at input position ``pos``; a document
        given twice (same derived id) must not get two different objects."""
        if meta is None or self.metadata is None:
            return
        if self.metadata.setdefault(doc_id, meta) != meta:
            raise ValueError(f"{what}(): documents {self.positions.get(doc_id, '?')} and {pos} have the same text "
                             f"(id {clip(doc_id)!r}) but different metadata; give ids to keep them apart")


def check_batch(docs: Sequence[str], ids: Sequence[str] | None, what: str, *, no_nul: bool = False,
                metadata: Sequence[Mapping | None] | None = None) -> tuple[list[str] | None, list | None]:
    """Check a call's documents (strings), their metadata (a JSON object or None per document,
    :func:`~hippo_engine.store.metadata.check_metadata`), NUL characters (``no_nul``: PostgreSQL
    text cannot hold them) and ids (unique non-empty strings, one per document), in that order;
    returns the checked ids and metadata (None where not given)."""
    check_documents(docs, what)
    metas = check_metadata(metadata, len(docs), what) if metadata is not None else None
    if no_nul:
        bad = [i for i, d in enumerate(docs) if "\x00" in d]
        if bad:
            raise ValueError(f"{what}(): documents {bad[:10]} contain NUL characters (\\x00), which PostgreSQL "
                             f"text cannot store; remove them first")
    return (check_document_ids(ids, len(docs), what) if ids is not None else None), metas


def split_documents(docs: Sequence[str], ids: Sequence[str] | None, what: str, chunk_size: int | None,
                    chunk_overlap: int = 0, tokenizer=None, *, no_nul: bool = False,
                    metadata: Sequence[Mapping | None] | None = None) -> DocumentBatch:
    """Validate ``docs`` (and ``ids``: unique non-empty strings, one per document; ``metadata``: a
    JSON object or None per document, :func:`~hippo_engine.store.metadata.check_metadata`) and split
    them into passages. Blank documents are skipped with a warning; documents given twice
    without ids collapse into one (same text, same derived id; their metadata must then agree).
    ``no_nul``: refuse NUL characters (PostgreSQL text cannot hold them)."""
    t0 = time.perf_counter()
    ids, metas = check_batch(docs, ids, what, no_nul=no_nul, metadata=metadata)
    out = DocumentBatch(metadata={} if metas is not None else None)
    for i, d in enumerate(docs):
        if not d.strip():
            out.skipped.append(i)
            continue
        doc_id = ids[i] if ids is not None else document_id(d)
        out.take_metadata(doc_id, metas[i] if metas is not None else None, i, what)
        if doc_id in out.documents:
            continue
        pids = []
        for p in document_chunks(d, chunk_size, chunk_overlap, tokenizer):
            pid = chunk_id(p)
            out.passages.setdefault(pid, p)
            pids.append(pid)
        out.documents[doc_id] = list(dict.fromkeys(pids))
        out.positions[doc_id] = i
    if out.skipped:
        logger.warning("%s(): skipping %d empty or whitespace-only document(s) at positions %s",
                       what, len(out.skipped), out.skipped[:10])
    dup = len(docs) - len(out.skipped) - len(out.documents)
    if dup > 0:
        logger.info("%s(): %d duplicate document(s) collapsed", what, dup)
    out.seconds = time.perf_counter() - t0
    return out


@dataclass(frozen=True)
class DocumentSplitter:
    """The whole document -> passages step of a memory: :meth:`split` checks a call's documents
    (ids, metadata) and cuts those longer than ``chunk_size`` tokens of the encoder's tokenizer
    (see :mod:`.chunking`). ``encoder``: a zero-argument provider of the encoder (``Models.encoder``),
    asked for its tokenizer only when a document may be that long. ``no_nul``: refuse NUL
    characters (a backend whose texts cannot hold them)."""

    chunk_size: int | None
    chunk_overlap: int
    encoder: Callable[[], Any]
    no_nul: bool = False

    @classmethod
    def of(cls, index: IndexConfig, storage: StorageConfig, encoder: Callable[[], Any]) -> DocumentSplitter:
        """The splitter of a memory configured with ``index`` and ``storage`` (its backend says
        whether texts may hold NUL characters)."""
        return cls(index.chunk_size, index.chunk_overlap, encoder, not get_backend(storage.storage_backend).accepts_nul)

    def may_cut(self, docs: Sequence[str]) -> bool:
        """Whether a document of ``docs`` may be longer than ``chunk_size`` tokens (its UTF-8 bytes
        bound its tokens), so the tokenizer is needed."""
        return self.chunk_size is not None and isinstance(docs, (list, tuple)) and any(
            isinstance(d, str) and len(d.encode("utf-8", "surrogatepass")) > self.chunk_size for d in docs)

    def split(self, docs: Sequence[str], ids: Sequence[str] | None, what: str,
              metadata: Sequence[Mapping | None] | None = None) -> DocumentBatch:
        """``docs`` (with ``ids`` and ``metadata``, for the call ``what``) checked and split into
        passages (:func:`split_documents`)."""
        tokenizer = getattr(self.encoder(), "tokenizer", None) if self.may_cut(docs) else None
        return split_documents(docs, ids, what, self.chunk_size, self.chunk_overlap, tokenizer, no_nul=self.no_nul,
                               metadata=metadata)


def index_documents(state, extractor, batch: DocumentBatch, llm_name: str = "") -> dict:
    """``HippoRAG.index``: extract facts for the batch's new passages with ``extractor`` and add
    the documents whose passages all have facts to ``state`` (an ``IndexState``) with a
    :class:`.writer.IndexWriter`; raises
    ``OpenIEError`` naming the failed passages after indexing the other documents. A call that
    changes nothing (every document unchanged) returns ``{"added": 0}``. The report's
    ``timings`` tile the call (and the split before it): their stages add up to ``total``."""
    watch = Stopwatch()
    watch.charge("split", batch.seconds)
    if not batch.documents:
        logger.warning("index(): nothing to index")
        return {"added": 0}
    new = {k: v for k, v in batch.passages.items() if not state.db.has_passage(k)}
    watch.lap("lookup")
    if not new:
        if not state.documents.document_plan(batch.documents).writes:
            return _update_metadata(state, batch)
        return _write(state, batch.documents, {}, None, batch, extractor.name)
    state.check_extractor(extractor.name)
    check_passage_lengths(extractor, new, batch)
    _announce_extraction(extractor, new, llm_name)
    watch.lap("check")
    ex = extractor.extract(new)
    watch.lap("extract")
    got = ex.passages       # a set built once (an ``Extraction`` builds it on each access)
    whole = {d: pids for d, pids in batch.documents.items() if all(p in got or p not in new for p in pids)}
    ok = {p: new[p] for pids in whole.values() for p in pids if p in new}
    watch.lap("select")
    report = _write(state, whole, ok, ex, batch, extractor.name, watch)
    report["timings"] = watch.report()
    report["openie_llm_passages"] = ex.llm_passages
    if ex.failed:
        raise OpenIEError(f"{extractor.name} fact extraction failed for {len(ex.failed)} of {len(new)} new "
                          f"passage(s); the other {len(ok)} were indexed. Run index() again to retry. First "
                          f"error: {next(iter(ex.failed.values()))}", ex.failed)
    return report


def _update_metadata(state, batch: DocumentBatch) -> dict:
    """A batch whose documents are all stored as they are: write the metadata that changed (a
    transaction of its own, under the writer lock); ``{"added": 0}`` when nothing changes."""
    table: DocumentTable = state.documents
    changed = table.metadata_changes(batch.metadata) if batch.metadata else {}
    if not changed:
        return {"added": 0}   # nothing changes (the report callers compare with)
    with state.lock.held(), state.db.transaction():
        state.db.put_document_metadata(changed)
    return {"added": 0, "documents": {"added": [], "replaced": [], "unchanged": len(batch.documents),
                                      "metadata_updated": sorted(changed)}}


def _write(state, documents: Mapping[str, list[str]], passages: Mapping[str, str], ex, batch: DocumentBatch,
           extractor: str, watch: Stopwatch | None = None) -> dict:
    """Index ``documents`` with the ``passages`` (new, with the extraction ``ex``'s facts) and,
    when the batch carries metadata, the changed metadata of these documents, in one transaction."""
    table: DocumentTable = state.documents
    changed = table.metadata_changes({d: batch.metadata[d] for d in documents if d in batch.metadata}) \
        if batch.metadata else {}
    with table.staging(changed):
        report = IndexWriter(state, watch).index(documents, passages, ex.triples if ex else None,
                                                 ex.hyperedges if ex else None, extractor=extractor)
    if batch.metadata is not None:
        report.setdefault("documents", {})["metadata_updated"] = sorted(changed)
    return report


def _announce_extraction(extractor, new: Mapping[str, str], llm_name: str) -> None:
    """Say how many new passages go to the LLM (extractors that keep results in a file)."""
    results = getattr(extractor, "results", None)
    if results is not None:
        todo = sum(1 for k in new if k not in results)
        announce(f"{plural(len(new), 'new passage')}: {todo} without stored results go to the LLM "
                 f"{llm_name!r} for {extractor.name} fact extraction")


def check_passage_lengths(extractor, new: Mapping[str, str], batch: DocumentBatch) -> None:
    """Refuse, before any work, passages longer than the extractor takes (``max_chars``: spaCy's
    ``max_length`` for ``extractor="ner"``), naming the first such document and ``chunk_size``."""
    limit = getattr(extractor, "max_chars", None)
    if limit is None:
        return
    long = {p: len(t) for p, t in new.items() if len(t) > limit}
    if not long:
        return
    bad = [d for d, pids in batch.documents.items() if any(p in long for p in pids)]
    d = bad[0]
    more = f" ({len(bad) - 1} more document(s) are too long)" if len(bad) > 1 else ""
    raise ValueError(f"index(): document {batch.positions.get(d, '?')} (id {clip(d)!r}) has a passage of "
                     f"{max(long.get(p, 0) for p in batch.documents[d]):,} characters; extractor="
                     f"{extractor.name!r} (spaCy) takes at most {limit:,} characters per passage{more}. Split "
                     f"it into smaller documents, or set chunk_size (e.g. HippoRAG(save_dir, chunk_size=1000): "
                     f"documents are cut into passages of that many tokens). Nothing was indexed.")


def clip(text: str, width: int = 60) -> str:
    """``text`` cut to ``width`` characters (with an ellipsis and its full length if cut)."""
    return text if len(text) <= width else f"{text[:width]}... ({len(text):,} chars)"


def preview(items: Sequence, shown: int = 3) -> str:
    """A short list for a log line: the first ``shown`` items, each clipped, and how many more."""
    head = ", ".join(repr(clip(x)) if isinstance(x, str) else str(x) for x in items[:shown])
    return f"[{head}{f', ... {len(items) - shown} more' if len(items) > shown else ''}]"


def delete_documents(state, batch: DocumentBatch | None, ids: Sequence[str] | None) -> dict:
    """``HippoRAG.delete``: remove the documents of ``batch`` (texts) or ``ids`` from ``state``;
    unknown ones are logged (a count and the first few, clipped) and reported in full."""
    if ids is not None:
        report = IndexWriter(state).delete(check_document_ids(ids, None, "delete"))
        missing, n = report["documents"]["unknown"], len(ids)
    elif batch is not None:
        texts = list(batch.documents.items())
        report = IndexWriter(state).delete(texts=texts)
        missing, n = report["documents"]["unknown_docs"], len(texts)
    else:
        raise ValueError("delete(): give the documents (texts) or their ids")
    if missing:
        logger.warning("delete(): %d of %d document(s) were not in the index: %s", len(missing), n,
                       preview(missing))
    return report


def attach_ids(solutions: Sequence, index) -> None:
    """Fill each ``QuerySolution``'s ``passage_ids`` (from its passages' texts where missing)
    and ``doc_ids`` (the documents holding each passage, from the index state's document table)."""
    table: DocumentTable = index.documents
    for s in solutions:
        if len(s.passage_ids) != len(s.docs):
            s.passage_ids = [chunk_id(d) for d in s.docs]
        s.doc_ids = table.documents_of(s.passage_ids)


__all__ = ["DocumentBatch", "DocumentSplitter", "attach_ids", "check_batch", "delete_documents", "document_id",
           "index_documents", "legacy_document_id", "legacy_passage_id", "split_documents"]
