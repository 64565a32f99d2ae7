"""Copy an index to another folder or storage backend, without extracting or encoding anything again
(``hippo-engine export``).

Everything an index holds goes across through the storage interface of both sides
(:class:`~hippo_engine.store.base.IndexStore`), so any registered backend can be the source or the
destination: the vectors of the four embedding stores with their texts (bit for bit: the same float32
rows), each passage's triples and hyperedges, the synonymy lists, the documents in the order they
were first indexed with their passages and metadata, the HiRAG communities and their reports, and
the settings the index was built with (extractor, embedding model, dimension, normalisation, passage
vectors) with its content version. What belongs to one copy only is made afresh by the destination:
its identity (a new index id, recorded in its folder), its schema version, its graph file (derived
from the facts when it is first opened) and the registry's timestamps (the documents keep their order).

The destination must be new: a folder that holds no index (it may exist, empty). The copy is one
transaction on the destination; if it fails, the destination is removed again, so a failed export
leaves nothing behind.
"""
from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hippo_engine.config import HippoConfig
from hippo_engine.hirag.report_store import META_PARAMS, META_VERSION
from hippo_engine.index.digest import META_KEY as DIGEST_KEY
from hippo_engine.progress import QUIET, Progress
from hippo_engine.store.base import ALL_STORE_NAMES, IndexStore, StoreError
from hippo_engine.store.opening import index_exists, open_index_store, with_recorded_backend
from hippo_engine.store.registry import backend_for

logger = logging.getLogger(__name__)

#: the meta rows that describe an index's content (copied); the others belong to one copy (its id,
#: folder, schema version, graph file copy, vector generations) and are made by the destination
PORTABLE_META = ("extractor", "embedding_model", "dim", "normalization", "passage_vectors", "sentence_vectors",
                 "version", DIGEST_KEY, META_VERSION, META_PARAMS)
#: rows handed to a destination store per call
BLOCK = 20_000
#: documents read from the source's registry per page
PAGE = 10_000


@dataclass
class ExportReport:
    """What an export copied: rows per kind, and where the copy went."""

    destination: str
    backend: str
    counts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"destination": self.destination, "backend": self.backend, "counts": dict(self.counts)}


def export_index(source_dir: str | Path, dest_dir: str | Path, dest_config: HippoConfig, *,
                 source_config: HippoConfig | None = None, progress: Progress = QUIET) -> ExportReport:
    """Copy the index in ``source_dir`` (opened with ``source_config``, its recorded backend by default)
    to a new index in ``dest_dir`` on the storage ``dest_config`` names (``storage_backend`` and its
    server settings). Refuses a destination that already holds an index, or the source itself."""
    source_dir, dest_dir = Path(source_dir), Path(dest_dir)
    src_config = with_recorded_backend(source_dir, source_config or HippoConfig(show_progress=False))
    if not index_exists(source_dir, src_config):
        raise FileNotFoundError(f"no index in {source_dir} to export")
    if source_dir.resolve() == dest_dir.resolve():
        raise ValueError(f"export: the destination {dest_dir} is the source index's own folder; name a new folder")
    if dest_dir.is_dir() and any(dest_dir.iterdir()):
        raise FileExistsError(f"export: {dest_dir} is not empty; the destination must be a new or empty folder "
                              "(an export never writes into an existing index)")
    src = open_index_store(source_dir, src_config)
    try:
        return _into_new_index(src, dest_dir, dest_config, progress)
    finally:
        src.close()


def _into_new_index(src: IndexStore, dest_dir: Path, dest_config: HippoConfig, progress: Progress) -> ExportReport:
    """Create the destination index and copy ``src`` into it; remove it again if anything fails (only
    what this export created: a database that already held an index is refused and left as it was)."""
    backend = backend_for(dest_config.storage_backend)
    made = not dest_dir.exists()
    try:
        dest = open_index_store(dest_dir, dest_config)
    except BaseException:
        if made:
            shutil.rmtree(dest_dir, ignore_errors=True)
        raise
    if dest.get_meta("version") is not None or dest.passage_count():
        where = dest.location
        dest.close()
        if made:                      # only the identity file this open wrote; the database is left alone
            shutil.rmtree(dest_dir, ignore_errors=True)
        raise FileExistsError(f"export: {where} already holds an index; the destination must be new "
                              "(another schema or graph name, or an empty database)")
    try:
        counts = copy_store(src, dest, vector_dtype=dest_config.embedding_storage_dtype, progress=progress)
        location = dest.location
    except BaseException:
        dest.close()
        backend.drop(dest_dir, dest_config)
        raise
    dest.close()
    return ExportReport(destination=location, backend=backend.name, counts=counts)


def copy_store(src: IndexStore, dest: IndexStore, *, vector_dtype: str = "float32",
               progress: Progress = QUIET) -> dict[str, int]:
    """Copy everything an index holds from ``src`` to the empty ``dest`` in one transaction of ``dest``;
    returns the rows copied per kind."""
    dim_text = src.get_meta("dim")
    if dim_text is None:
        raise StoreError("export: the source index holds nothing yet (no passages were ever indexed)")
    dim = int(dim_text)
    counts: dict[str, int] = {}
    with dest.transaction():
        for namespace in ALL_STORE_NAMES:       # passages first: the facts and documents name them
            counts[f"{namespace}_vectors"] = _copy_vectors(src, dest, namespace, dim, vector_dtype, progress)
        counts.update(_copy_facts(src, dest))
        counts.update(_copy_documents(src, dest))
        counts["communities"], counts["community_reports"] = _copy_communities(src, dest)
        for key in PORTABLE_META:
            value = src.get_meta(key)
            if value is not None:
                dest.set_meta(key, value)
    logger.info("export: copied %s", counts)
    return counts


def _copy_vectors(src: IndexStore, dest: IndexStore, namespace: str, dim: int, vector_dtype: str,
                  progress: Progress) -> int:
    """The vectors of one embedding store with their texts, in the source's row order."""
    store = src.vector_scan(namespace, dim)
    keys = [str(k) for k in store.ids]
    if not keys:
        return 0
    matrix, texts = store.matrix, store.texts(keys)
    writer = dest.vector_writer(namespace, dim, vector_dtype=vector_dtype)
    with progress.bar(total=len(keys), desc=f"Copying {namespace} vectors", unit="row") as bar:
        for start in range(0, len(keys), BLOCK):
            stop = start + BLOCK
            writer.upsert(keys[start:stop], texts[start:stop], matrix[start:stop])
            bar.update(len(keys[start:stop]))
    return len(keys)


def _copy_facts(src: IndexStore, dest: IndexStore) -> dict[str, int]:
    """Each passage's triples and hyperedges, in stored order, and the synonymy lists."""
    triples = src.load_passage_triples()
    for pid, rows in triples.items():
        dest.put_passage_triples(pid, rows)
    hyperedges = src.load_passage_hyperedges()
    for pid, edges in hyperedges.items():
        dest.put_passage_hyperedges(pid, edges)
    synonymy = src.load_synonymy()
    if synonymy:
        dest.replace_synonymy_lists(synonymy)
    return {"triples": sum(map(len, triples.values())), "hyperedges": sum(map(len, hyperedges.values())),
            "synonymy_lists": len(synonymy)}


def _registry(src: IndexStore) -> Iterator[str]:
    """The source's document ids in the order they were first indexed."""
    offset = 0
    while page := src.document_page(offset, PAGE):
        yield from (doc_id for doc_id, _, _ in page)
        offset += len(page)


def _copy_documents(src: IndexStore, dest: IndexStore) -> dict[str, int]:
    """The documents (registry order), the passages each holds, and their metadata."""
    doc_ids = list(_registry(src))
    passages = src.document_passages(doc_ids)
    dest.put_documents({d: passages[d] for d in doc_ids if d in passages})
    dest.register_documents(doc_ids)          # in order; also the ids kept without document rows
    metadata = src.document_metadata(doc_ids)
    if metadata:
        dest.put_document_metadata(metadata)
    return {"documents": len(doc_ids), "document_metadata": len(metadata)}


def _copy_communities(src: IndexStore, dest: IndexStore) -> tuple[int, int]:
    """The HiRAG communities (``(id, level, parent, JSON)`` from their JSON) and their reports."""
    rows = []
    for text in src.load_community_rows():
        data = json.loads(text)
        rows.append((data["id"], int(data["level"]), data.get("parent"), text))
    reports = [(key, text, json.loads(text).get("source") or "") for key, text in src.load_report_rows()]
    if rows or reports:
        dest.replace_communities(rows, reports)
    return len(rows), len(reports)


__all__ = ["PORTABLE_META", "ExportReport", "copy_store", "export_index"]
