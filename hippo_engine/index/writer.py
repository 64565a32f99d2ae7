"""Writing an index: :class:`IndexWriter` - ``plan()``, ``write(plan)``, ``derive()``.

Every change (``index()`` of documents, ``delete()``, ``Index.add``/``Index.remove``) runs the
same three steps under the writer lock:

1. ``plan``: which passages are new (not stored), which stored passages become dead (their
   documents were replaced or deleted and no other document holds them), which document rows
   to write or delete; the new passages' facts normalised. Reads only.
2. ``write(plan)``: one transaction: the rows and vectors of the new passages, entities and facts,
   the synonymy lists of the new entities, a version bump; the document rows; the removal of the
   dead passages with the entities and facts only they held, the synonymy lists of removed
   entities, a second version bump. A failure rolls everything back and reloads what is held in
   memory.
3. ``derive()``, after the commit, whoever the caller is: the graph (merged in place of a rebuild
   when the change only added; rebuilt when it removed, except by a lean writer: see below), its
   file ``graph.npz`` and the database's copy of it, and the backend's search indexes.

A *lean* writer (a PostgreSQL index searched in the database: its stores hold no vector and no
id) never reads every fact or synonymy list: which passages, entities and facts are stored is
asked of the database for the ids of the change; the entities and facts only removed passages
held are found in SQL (:class:`~hippo_engine.store.postgres.changes.ChangeQueries`); the
synonymy lists are read per source (:class:`.synonymystate.SynonymyKeeper`); the content digest
is updated from the added and removed passages' facts; ``graph.npz`` is rewritten for the change
by streaming the previous version's file (:meth:`.graphstate.GraphKeeper.update_file`), so no
graph is held either. What it holds grows with the change, not with the index.

Each stage's time goes to the :class:`~hippo_engine.index.stopwatch.Stopwatch` of the call; the
report carries them (``timings``).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from hippo_engine.datatypes import Hyperedge, Triple
from hippo_engine.index.digest import META_KEY as DIGEST_KEY
from hippo_engine.index.digest import ContentDigest
from hippo_engine.index.document_table import DocumentPlan
from hippo_engine.index.encoding import encode_into, mean_passage_vectors, new_texts, pooled_sentences
from hippo_engine.index.facts import graph_input, normalize_hyperedges, normalize_triples
from hippo_engine.index.removal import entity_ids, fact_ids, live_ids, removed_in_sql
from hippo_engine.index.stopwatch import Stopwatch
from hippo_engine.progress import announce
from hippo_engine.store import EmbeddingStore
from hippo_engine.store.document_registry import legacy_ids

logger = logging.getLogger(__name__)


@dataclass
class IndexPlan:
    """What one change does: ``new`` passages (id -> text) with their normalised ``triples`` and
    ``hyperedges``; ``dead`` stored passages to remove; ``documents`` (rows to write, ids added,
    replaced, unchanged) and ``deleted_documents`` (document rows to delete)."""

    extractor: str = "openie"
    new: dict[str, str] = field(default_factory=dict)
    triples: dict[str, list[Triple]] = field(default_factory=dict)
    hyperedges: dict[str, list[Hyperedge]] = field(default_factory=dict)
    dead: set[str] = field(default_factory=set)
    documents: DocumentPlan = field(default_factory=DocumentPlan)
    deleted_documents: list[str] = field(default_factory=list)
    report_removed: bool = True     # the report says "removed": 0 when nothing was


@dataclass
class _Written:
    """What ``write`` changed, for ``derive``: the version before, the added passages and their
    graph input, the synonymy changes, whether anything was removed."""

    old_version: str
    old_digest: str
    added: list[str] = field(default_factory=list)
    triples: dict = field(default_factory=dict)
    weights: dict = field(default_factory=dict)
    synonymy: dict = field(default_factory=dict)
    removed: bool = False
    removal: tuple | None = None    # a lean writer's removal, for the graph (see ``GraphKeeper.change``)


class IndexWriter:
    """Plans, writes and derives the changes of one :class:`~hippo_engine.index.state.IndexState`
    (``state``): each change takes the writer lock, refreshes ``state`` and goes to its
    collaborators (``documents``, ``content``, ``synonymy_keeper``, ``graph_keeper``) and store."""

    #: texts encoded and written per step of a write (bounds the new vectors held in memory)
    ENCODE_CHUNK = 131072

    def __init__(self, state, watch: Stopwatch | None = None):
        self.state = state
        self.watch = watch or Stopwatch()

    # ------------------------------------------------------------------ 1. plan
    def plan(self, documents: Mapping[str, Sequence[str]], passages: Mapping[str, str],
             triples: Mapping[str, Sequence[Triple]] | None = None,
             hyperedges: Mapping[str, Sequence[Hyperedge]] | None = None, *, extractor: str = "openie",
             dead: Iterable[str] = ()) -> IndexPlan:
        """The plan of adding ``passages`` (those not stored) with their raw facts and recording
        ``documents`` (replacing stored documents of the same ids; their old passages no other
        document holds become dead), and of removing the passages ``dead``."""
        st, norm_of = self.state, self.state.config.normalization
        docs = st.documents.document_plan(documents)
        self.watch.lap("plan_documents")
        stored = st.stores["passage"].existing
        have = stored(passages)
        new = {p: passages[p] for p in passages if p not in have}
        if new:    # facts of another kind are refused; a removal adds none
            st.check_extractor(extractor)
        plan = IndexPlan(extractor, new, documents=docs)
        plan.triples = {p: normalize_triples((triples or {}).get(p, ()), norm_of) for p in new}
        plan.hyperedges = {p: normalize_hyperedges((hyperedges or {}).get(p, ()), norm_of) for p in new}
        plan.dead = self._unheld_after(docs, docs.stale) | set(dead)
        plan.dead = {p for p in stored(plan.dead) if p not in new}
        self.watch.lap("prepare")
        return plan

    def _unheld_after(self, docs: DocumentPlan, pids: Iterable[str]) -> set[str]:
        """Those of ``pids`` no document will hold once ``docs``' rows are written (every holder
        is a document being rewritten without them)."""
        held = self.state.db.passage_documents(set(pids))
        return {p for p in pids if all(d in docs.writes for d in held.get(p, ()))}

    # ------------------------------------------------------------------ 2. write
    def write(self, plan: IndexPlan) -> tuple[dict, _Written]:
        """Carry ``plan`` out in one transaction; the report and what ``derive`` needs."""
        st, watch = self.state, self.watch
        done = _Written(st.loaded_version, st.digest)
        report: dict = {"added": 0}
        try:
            with st.db.transaction():
                st.db.after_commit(self._commit_lap)    # the first hook: before the graph file's
                if plan.new:
                    report = self._add_rows(plan, done)
                st.documents.write_documents(plan.documents.writes)
                if plan.deleted_documents:
                    st.db.delete_documents(plan.deleted_documents)
                self._register_bare(plan)
                watch.lap("write_documents")
                if plan.dead:
                    report.update(self._remove_rows(sorted(plan.dead), done))
                    done.removed = True
                elif plan.report_removed:
                    report["removed"] = 0
                watch.lap("remove_stale")
        except BaseException:
            st.reload()
            raise
        return report, done

    def _register_bare(self, plan: IndexPlan) -> None:
        """Inside the transaction: keep the document registry whole for passages without document rows
        (``add``; removed ones): they count as documents under their legacy ids, as retrieval reports them."""
        db, writes = self.state.db, plan.documents.writes
        bare = self.state.documents.unheld(plan.new) if plan.new else set()
        if bare:
            db.register_documents(legacy_ids(p for p in plan.new if p in bare))
        # a stored passage a document now holds may have been bare: its legacy row goes (unless a document has that id)
        held = sorted({p for pids in writes.values() for p in pids if p not in plan.new})
        gone = [d for d in legacy_ids(held) if d not in writes]
        gone += legacy_ids(sorted(plan.dead))
        if gone:
            db.unregister_documents(set(gone) - set(db.document_passages(gone)))

    def _commit_lap(self) -> None:
        self.watch.lap("commit")

    def _add_rows(self, plan: IndexPlan, done: _Written) -> dict:
        """Inside the transaction: rows, vectors and synonymy of the new passages, the version mark;
        then the new facts are taken into what ``state`` holds in memory."""
        st, watch = self.state, self.watch
        stores, new_ids = st.stores, list(plan.new)
        norm, hyper = plan.triples, plan.hyperedges
        if self.lean:       # which entities and facts are stored: one question to the database per store
            stores["entity"].existing(entity_ids(norm, hyper))
            stores["fact"].existing(fact_ids(norm, hyper))
        ent_text, fact_txt = new_texts(stores, norm, hyper)
        eids, fids = sorted(ent_text), sorted(fact_txt)
        announce(f"indexing {len(new_ids)} passage(s): {len(eids)} new entities, {len(fids)} new facts to embed, "
                 f"then synonymy edges and the graph")
        watch.declare("embed_passages", "embed_entities", "embed_facts", "write_stores")
        self._write_meta(plan.extractor)
        self._encode_all(plan, eids, ent_text, fids, fact_txt)
        for p in new_ids:
            st.db.put_passage_triples(p, norm[p])
            if hyper[p]:
                st.db.put_passage_hyperedges(p, hyper[p])
        watch.lap("write_stores")
        done.synonymy = st.synonymy_keeper.update(added=eids, removed=())
        watch.lap("synonymy")
        st.mark(self._mark_change(done.synonymy, added=[(p, norm[p], hyper[p]) for p in new_ids]))
        watch.lap("mark_change")
        st.content.note_added(new_ids, norm, hyper)
        done.added = new_ids
        done.triples, done.weights = graph_input(norm, hyper)
        watch.lap("update_caches")
        return {"added": len(new_ids), "new_entities": len(eids), "new_facts": len(fids)}

    def _encode_all(self, plan: IndexPlan, eids, ent_text, fids, fact_txt) -> None:
        stores, new_ids, hyper = self.state.stores, list(plan.new), plan.hyperedges
        encode = partial(self._encode_into, watch=self.watch)
        mean_of_facts = self.state.config.passage_vectors == "sentence_mean" and any(hyper.values())
        if self.state.config.sentence_vectors == "pooled" and any(hyper.values()) and not mean_of_facts:
            fids = pooled_sentences(self.state.encoder, stores, new_ids, plan.new, hyper, fact_txt, self.watch,
                                    step=self.ENCODE_CHUNK)
        elif not mean_of_facts:
            encode(stores["passage"], new_ids, [plan.new[p] for p in new_ids], "passages")
        encode(stores["entity"], eids, [ent_text[e] for e in eids], "entities")
        encode(stores["fact"], fids, [fact_txt[f] for f in fids], "facts")
        if mean_of_facts:
            mean_passage_vectors(stores, new_ids, plan.new, hyper, self.watch, encode)

    @property
    def lean(self) -> bool:
        """Whether this writer's stores hold no vectors and ids (see the module documentation)."""
        return not self.state.stores["entity"].holds_vectors

    def _remove_rows(self, gone: list[str], done: _Written) -> dict:
        """Inside the transaction: remove passages ``gone`` with the entities and facts only they
        held, update synonymy, mark the version; then update what ``state`` holds in memory."""
        st = self.state
        stores = st.stores
        content = st.content
        if self.lean:
            triples, hyper, dead_ents, dead_facts = removed_in_sql(st.db, stores, gone)
        else:
            triples, hyper = content.passage_triples, content.passage_hyperedges
            live_ents, live_facts = live_ids(triples, hyper, set(gone))
            dead_ents = [e for e in stores["entity"].ids if e not in live_ents]
            dead_facts = [f for f in stores["fact"].ids if f not in live_facts]
        stores["passage"].delete(gone)
        stores["entity"].delete(dead_ents)
        stores["fact"].delete(dead_facts)
        st.db.delete_passage_triples(gone)
        st.db.delete_passage_hyperedges(gone)
        syn_changes = st.synonymy_keeper.update(added=(), removed=dead_ents)
        st.mark(self._mark_change(syn_changes, removed=[(p, triples.get(p), hyper.get(p)) for p in gone]))
        if self.lean:
            g_triples, g_weights = graph_input({p: triples.get(p, []) for p in gone},
                                               {p: hyper.get(p, []) for p in gone})
            done.removal = (gone, g_triples, g_weights, syn_changes, dead_ents)
        if content.loaded or not self.lean:
            content.note_removed(gone, dead_facts)
        return {"removed": len(gone), "removed_entities": len(dead_ents), "removed_facts": len(dead_facts)}

    def _encode_into(self, store: EmbeddingStore, keys: Sequence[str], texts: Sequence[str], what: str, *,
                     watch: Stopwatch) -> None:
        """Encode and store ``texts``, ``ENCODE_CHUNK`` at a time (:func:`.encoding.encode_into`)."""
        encode_into(self.state.encoder, store, keys, texts, what, watch, step=self.ENCODE_CHUNK,
                    progress=self.state.progress)

    def _write_meta(self, extractor: str) -> None:
        st = self.state
        db = st.db
        if db.get_meta("extractor") is None:
            db.set_meta("extractor", extractor)
        if db.get_meta("embedding_model") is None:
            db.set_meta("embedding_model", st.embedding_model_name)
            db.set_meta("dim", str(st.stores["passage"].dim))
            db.set_meta("normalization", st.config.normalization)
            db.set_meta("passage_vectors", st.config.passage_vectors)
            if st.config.sentence_vectors != "encode":      # absent: sentences encoded alone (older indexes too)
                db.set_meta("sentence_vectors", st.config.sentence_vectors)

    def _mark_change(self, syn_changes: Mapping[str, tuple], added: Sequence[tuple] = (),
                     removed: Sequence[tuple] = ()) -> tuple[str, str]:
        """Bump the version and update the content checksum by the (passage id, triples,
        hyperedges) added and removed and the synonymy changes. Returns both."""
        st = self.state
        d = ContentDigest.from_hex(st.digest)
        for pid, ts, hs in added:
            d.add_passage(pid, ts, hs)
        for pid, ts, hs in removed:
            d.remove_passage(pid, ts, hs)
        d.change_synonymy(syn_changes)
        version = str(int(st.version) + 1)
        st.db.set_meta("version", version)
        st.db.set_meta(DIGEST_KEY, d.hex())
        return version, d.hex()

    # ------------------------------------------------------------------ 3. derive
    def derive(self, done: _Written, extractor: str | None) -> None:
        """After the commit: the graph (merged with the added passages, or rebuilt after a
        removal; a lean writer rewrites the file by streaming instead), its file and copy, and the
        backend's search indexes."""
        st, watch = self.state, self.watch
        added = (done.added, done.triples, done.weights, done.synonymy) if done.added else None
        if self.lean and (added or done.removal):      # the file rewritten by streaming: no graph held
            st.graph_keeper.update_file(done.old_version, done.old_digest, added=added, removed=done.removal)
            watch.lap("graph")
        else:
            if done.removed:
                st.graph_keeper.rebuild()
            elif done.added:
                st.graph_keeper.insert(done.old_version, done.old_digest, done.added, done.triples, done.weights,
                                       done.synonymy)
            watch.lap("graph")
            if done.added or done.removed:
                st.graph_keeper.save()
        watch.lap("save_graph")
        if done.added and self._prepare_search(extractor or st.extractor):
            watch.lap("hnsw")

    def _prepare_search(self, extractor: str | None) -> bool:
        """Build the store's search indexes over the vectors if it keeps any (once, after the
        first batch; later rows go into them: PostgreSQL's HNSW with ``postgres_search="hnsw"``).
        Entities are searched only by the linkings that embed query entities; passages by the dense
        prior at scale (``retrieve/ppr/ann_prior.py``)."""
        st, linking = self.state, self.state.config.linking
        if not st.stores["fact"].prepare_search():
            return False
        st.stores["passage"].prepare_search()
        if linking in ("query", "ner", "ner_fact") or (linking == "auto" and extractor == "ner"):
            st.stores["entity"].prepare_search()
        return True

    # ------------------------------------------------------------------ the three together
    def index(self, documents: Mapping[str, Sequence[str]], passages: Mapping[str, str], triples=None,
              hyperedges=None, *, extractor: str = "openie") -> dict:
        """Plan, write and derive adding ``passages`` and recording ``documents`` (the plan is read
        inside the change's transaction, under the database's write lock). The report has
        ``documents``: ids added and replaced, how many unchanged."""
        report = self._run(lambda: self.plan(documents, passages, triples, hyperedges, extractor=extractor))
        report["documents"] = self.last_plan.documents.report()
        return report

    def delete(self, doc_ids: Sequence[str] = (), texts: Sequence[tuple[str, list[str]]] = ()) -> dict:
        """Plan, write and derive removing documents by id and by text (see
        ``HippoRAG.delete``): documents by id, and by text (``(derived id, passage ids)``
        per text: the documents holding exactly those passages, or old passages without document
        rows), with the passages no remaining document holds. The report has ``documents``: ids
        removed, ids unknown, and for texts the positions of those not found (``unknown_docs``)."""
        out: dict = {}
        report = self._run(lambda: self._plan_deletion(doc_ids, texts, out))
        report["documents"] = out
        return report

    def remove(self, passage_ids: Iterable[str]) -> dict:
        """Plan, write and derive removing passages (no document rows change)."""
        return self._run(lambda: self.plan({}, {}, dead=passage_ids), report_removed=True)

    def add(self, passages: Mapping[str, str], triples=None, hyperedges=None, *, extractor: str = "openie") -> dict:
        """Plan, write and derive adding passages without documents."""
        return self._run(lambda: self.plan({}, passages, triples, hyperedges, extractor=extractor),
                         report_removed=False)

    def _run(self, make_plan, report_removed: bool = True) -> dict:
        st = self.state
        with st.lock.held():
            self.watch.lap("lock")
            st.refresh()
            self.watch.lap("refresh")
            return self._locked_run(make_plan, report_removed)

    def _locked_run(self, make_plan, report_removed: bool) -> dict:
        st = self.state
        try:
            with st.db.transaction():
                st.db.after_commit(self._commit_lap)
                plan = self.last_plan = make_plan()
                plan.report_removed = report_removed
                if not plan.new and not plan.dead and not report_removed:
                    return {"added": 0}
                report, done = self.write(plan)
        except BaseException:
            st.reload()
            raise
        finally:
            self._forget_answers()
        self.derive(done, plan.extractor if plan.new else None)
        return report

    def _forget_answers(self) -> None:
        """Let a lean writer's stores forget which ids of this change they hold (the next change
        asks again), so nothing held grows from change to change."""
        for store in self.state.loaded_stores.values():
            store.forget()

    def _plan_deletion(self, doc_ids, texts, out: dict) -> IndexPlan:
        st = self.state
        ids, loose, unknown_docs = st.documents.resolve_texts(texts)
        ids = list(dict.fromkeys([*doc_ids, *ids]))
        stored, legacy = st.documents.stored_documents(ids)
        plan = IndexPlan(deleted_documents=[d for d in stored if d not in legacy])
        gone = {p for pids in stored.values() for p in pids}
        held = st.db.passage_documents(gone)
        deleting = set(plan.deleted_documents)
        dead = {p for p in gone if all(d in deleting for d in held.get(p, ()))} | loose
        plan.dead = st.stores["passage"].existing(dead)
        out.update({"removed": [d for d in ids if d in stored], "unknown": [d for d in doc_ids if d not in stored]})
        if texts:
            out["unknown_docs"] = unknown_docs
        return plan


__all__ = ["IndexPlan", "IndexWriter"]
