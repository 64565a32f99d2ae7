"""Encoding an ``Index.add``'s new texts into the embedding stores, a chunk at a time, so at
most one chunk of new vectors is held beside the stores (a 100k-passage batch has a million
facts: 1.5 GB of float32)."""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from hippo_engine.datatypes import Hyperedge
from hippo_engine.ids import entity_id, fact_id, fact_text, hyperedge_id
from hippo_engine.index.stopwatch import Stopwatch
from hippo_engine.models.encoder import Encoder
from hippo_engine.progress import QUIET, Progress
from hippo_engine.store import EmbeddingStore


def encode_into(encoder: Encoder, store: EmbeddingStore, keys: Sequence[str], texts: Sequence[str], what: str,
                watch: Stopwatch, *, step: int, progress: Progress = QUIET) -> None:
    """Encode ``texts`` and upsert them under ``keys``, ``step`` at a time; encoding is timed as
    ``embed_<what>``, writing as ``write_stores``."""
    n = len(keys)
    chunks = max(1, -(-n // step))
    for i, s in enumerate(range(0, n, step)):
        desc = f"Embedding {what}" + (f" ({i + 1}/{chunks})" if chunks > 1 else "")
        vec = encoder.encode(list(texts[s:s + step]), show_progress=progress.show, desc=desc)
        watch.lap(f"embed_{what}")
        store.upsert(keys[s:s + step], texts[s:s + step], vec)
        watch.lap("write_stores")


def mean_passage_vectors(stores: Mapping[str, EmbeddingStore], ids: Sequence[str], passages: Mapping[str, str],
                         hyper: Mapping[str, Sequence[Hyperedge]], watch: Stopwatch, encode) -> None:
    """``passage_vectors="sentence_mean"``: a passage's vector is the normalised mean of its
    facts' (sentences') vectors, which are encoded anyway; passages without facts are encoded
    with ``encode(store, keys, texts, what)``."""
    st, facts = stores["passage"], stores["fact"]
    bare = [p for p in ids if not hyper[p]]
    encode(st, bare, [passages[p] for p in bare], "passages")
    done = [p for p in ids if hyper[p]]
    vecs = np.zeros((len(done), st.dim), np.float32)
    fids = {p: list(dict.fromkeys(hyperedge_id(h) for h in hyper[p])) for p in done}
    every = list(dict.fromkeys(f for p in done for f in fids[p]))
    pos = {f: i for i, f in enumerate(every)}
    fact_vecs = facts.vectors_of(every)          # one read (a query, for vectors in the database)
    for i, p in enumerate(done):
        v = np.asarray(fact_vecs[[pos[f] for f in fids[p]]], np.float64).mean(axis=0)
        vecs[i] = v / max(np.linalg.norm(v), 1e-12)
    st.upsert(done, [passages[p] for p in done], vecs)
    watch.lap("embed_passages")


def sentence_spans(passage: str, hyperedges: Sequence[Hyperedge]) -> Iterator[tuple[str, int, int]]:
    """``(fact id, start, end)``: where each hyperedge's sentence lies in ``passage`` (in order from the
    previous one; a sentence whose line breaks were made spaces is matched over any whitespace); a sentence
    not found is left out."""
    cursor = 0
    for h in hyperedges:
        start = passage.find(h.text, cursor)
        end = start + len(h.text)
        if start < 0:
            found = re.compile(r"\s+".join(map(re.escape, h.text.split()))).search(passage, cursor)
            if found is None:
                continue
            start, end = found.span()
        cursor = end
        yield fact_id(h.text), start, end


def pooled_sentences(encoder: Encoder, stores: Mapping[str, EmbeddingStore], ids: Sequence[str],
                     passages: Mapping[str, str], hyper: Mapping[str, Sequence[Hyperedge]],
                     fact_txt: Mapping[str, str], watch: Stopwatch, *, step: int) -> list[str]:
    """``sentence_vectors="pooled"``: the passages ``ids`` encoded ``step`` at a time, each new sentence
    (``fact_txt``: fact id -> text) pooled from the forward pass of the first of them that holds it
    (:meth:`~hippo_engine.models.encoder.Encoder.encode_spans`); both kinds of vectors stored. Returns the
    ids of the new sentences left to encode alone (not found in a passage, or past its truncation)."""
    taken: set[str] = set()
    left = set(fact_txt)
    for s in range(0, len(ids), step):
        chunk = list(ids[s:s + step])
        spans, keys = [], []
        for i, p in enumerate(chunk):
            for fid, a, b in sentence_spans(passages[p], hyper[p]):
                if fid in left and fid not in taken:
                    taken.add(fid)
                    spans.append((i, a, b))
                    keys.append(fid)
        texts = [passages[p] for p in chunk]
        vecs, span_vecs, pooled = encoder.encode_spans(texts, spans)
        watch.lap("embed_passages")
        stores["passage"].upsert(chunk, texts, vecs)
        got = [f for f, ok in zip(keys, pooled.tolist(), strict=True) if ok]
        stores["fact"].upsert(got, [fact_txt[f] for f in got], span_vecs[pooled])
        left.difference_update(got)
        watch.lap("write_stores")
    return sorted(left)


def new_texts(stores: Mapping[str, EmbeddingStore], norm: Mapping[str, Sequence[tuple]],
              hyper: Mapping[str, Sequence[Hyperedge]]) -> tuple[dict[str, str], dict[str, str]]:
    """The entities and facts of new passages (``norm``: normalised triples, ``hyper``:
    hyperedges, per passage) that the stores do not hold yet: (entity id -> phrase, fact id ->
    fact text)."""
    ent_text: dict[str, str] = {}
    fact_txt: dict[str, str] = {}

    def note(phrases, ft: str) -> None:
        for phrase in phrases:
            eid = entity_id(phrase)
            if eid not in stores["entity"]:
                ent_text[eid] = phrase
        fid = fact_id(ft)
        if fid not in stores["fact"]:
            fact_txt[fid] = ft

    for p in norm:
        for t in norm[p]:
            note((t[0], t[2]), fact_text(t))
        for h in hyper[p]:
            note(h.entities, h.text)
    return ent_text, fact_txt


__all__ = ["encode_into", "mean_passage_vectors", "new_texts", "pooled_sentences", "sentence_spans"]
