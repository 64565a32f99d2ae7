"""Seeded synthetic HippoRAG-shaped corpora for the speed benchmark, and their stand-in embeddings.

Embeddings are computed from a hash of each text (entity clusters get nearby vectors), so encoding
is not what the benchmark times.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hippo_engine.ids import chunk_id, fact_text, mdhash_id
from hippo_engine.models.encoder import Encoder
from hippo_engine.normalize import normalize_phrase

DIM = 384


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def hash_vectors(seeds: np.ndarray, dim: int = DIM) -> np.ndarray:
    """(len(seeds), dim) unit float32 vectors, a pure function of each uint64 seed."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    out = np.empty((len(seeds), dim), np.float32)
    cols = np.arange(dim, dtype=np.uint64)
    for s in range(0, len(seeds), 8192):
        x = _splitmix(seeds[s:s + 8192, None] * np.uint64(1_000_003) + cols[None, :])
        v = ((x >> np.uint64(40)).astype(np.float32) / np.float32(2 ** 23)) - np.float32(1.0)
        out[s:s + 8192] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return out


def text_seed(text: str) -> int:
    """A uint64 seed from a text's hash."""
    return int(mdhash_id(text)[:16], 16)


# ------------------------------------------------------------------ synthetic corpus
class SyntheticCorpus:
    """Seeded HippoRAG-shaped data.

    Passage p introduces ``new_per_passage`` entities and mentions ``old_per_passage`` earlier
    ones (half of them popular, Zipf-drawn); its ``triples_per_passage`` triples link random
    pairs of those. Entity vectors: a hash vector, or, for an entity in a cluster, the cluster's
    centre plus ``sigma`` x its own hash vector (cosine ~0.85-0.9 inside a cluster).
    ``dup_rate``: share of entities that join a random earlier entity's cluster;
    ``cluster_share``/``cluster_size``: share of entities put in clusters of about that size.
    """

    def __init__(self, P: int, seed: int = 0, new_per_passage: int = 5, old_per_passage: int = 3,
                 triples_per_passage: int = 10, dup_rate: float = 0.05, cluster_share: float = 0.0,
                 cluster_size: int = 20, sigma: float = 0.5, dim: int = DIM):
        rng = np.random.default_rng(seed)
        self.P, self.dim, self.sigma = P, dim, sigma
        E = P * new_per_passage
        self.E = E
        self.names = [f"ent{i}" for i in range(E)]
        self.entity_index = {n: i for i, n in enumerate(self.names)}
        # clusters: anchor[i] = cluster centre seed (-1: none)
        anchor = np.full(E, -1, np.int64)
        if cluster_share > 0:
            members = rng.choice(E, int(E * cluster_share), replace=False)
            n_clusters = max(1, len(members) // cluster_size)
            anchor[members] = rng.integers(0, n_clusters, len(members)) + 2 * E
        if dup_rate > 0:
            dups = rng.choice(np.arange(1, E), int(E * dup_rate), replace=False)
            src = (rng.random(len(dups)) * dups).astype(np.int64)  # an earlier entity
            anchor[dups] = np.where(anchor[src] >= 0, anchor[src], E + src)
            first = anchor[src] < 0  # the source joins its own cluster as the centre
            anchor[src[first]] = E + src[first]
        self.anchor = anchor
        self.passages: list[str] = []
        self.triples: dict[str, list[tuple[str, str, str]]] = {}
        self.first_fact: list[str] = []
        for p in range(P):
            new = np.arange(p * new_per_passage, (p + 1) * new_per_passage)
            hi = max(1, p * new_per_passage)
            old = np.concatenate([rng.integers(0, hi, old_per_passage - old_per_passage // 2),
                                  (rng.zipf(1.6, old_per_passage // 2) - 1) % hi])
            ents = np.concatenate([new, old])
            pairs = rng.integers(0, len(ents), (triples_per_passage, 2))
            pairs[:, 1] = (pairs[:, 0] + 1 + pairs[:, 1] % (len(ents) - 1)) % len(ents)
            ts = [(self.names[ents[a]], f"rel {t % 7}", self.names[ents[b]]) for t, (a, b) in enumerate(pairs)]
            text = f"passage {p}: " + "; ".join(" ".join(t) for t in ts)
            self.passages.append(text)
            self.triples[chunk_id(text)] = ts
            self.first_fact.append(fact_text(tuple(normalize_phrase(x) for x in ts[0])))
        self._rng = rng

    def entity_vectors(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx, np.int64)
        own = hash_vectors(idx.astype(np.uint64) + np.uint64(7), self.dim)
        a = self.anchor[idx]
        m = a >= 0
        if m.any():
            # anchor E + j: the cluster is centred on entity j's own vector; anchor >= 2E: a pure centre
            am = a[m]
            centre_seed = np.where(am < 2 * self.E, am - self.E, am)
            centre = hash_vectors(centre_seed.astype(np.uint64) + np.uint64(7), self.dim)
            # a cluster centre that is itself an entity (E + j) uses entity j's own vector
            v = centre + np.float32(self.sigma) * own[m]
            is_self = a[m] == idx[m] + self.E
            v[is_self] = centre[is_self]
            own[m] = v / np.linalg.norm(v, axis=1, keepdims=True)
        return own

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), np.float32)
        ent_pos, ent_idx, other_pos, other_seed = [], [], [], []
        for i, t in enumerate(texts):
            e = self.entity_index.get(t)
            if e is not None:
                ent_pos.append(i)
                ent_idx.append(e)
            else:
                other_pos.append(i)
                other_seed.append(text_seed(t))
        if ent_pos:
            out[ent_pos] = self.entity_vectors(np.array(ent_idx))
        if other_pos:
            out[other_pos] = hash_vectors(np.array(other_seed, dtype=np.uint64), self.dim)
        return out

    def queries(self, n: int, seed: int = 1) -> np.ndarray:
        """Each query: a passage's vector plus its first fact's vector plus noise (normalised)."""
        r = np.random.default_rng(seed)
        ps = r.choice(len(self.passages), n, replace=False)
        v = self.encode([self.passages[p] for p in ps]) + self.encode([self.first_fact[p] for p in ps])
        v += 0.3 * r.standard_normal(v.shape).astype(np.float32) / np.sqrt(self.dim)
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


class LookupEncoder(Encoder):
    """The corpus's stand-in vectors: embedding cost is excluded from the index timings."""

    def __init__(self, corpus: SyntheticCorpus):
        self.corpus, self.dim, self.name = corpus, corpus.dim, "synthetic-lookup"

    def encode(self, texts, *, instruction=None, show_progress=False, desc=""):
        if not len(texts):
            return np.zeros((0, self.dim), np.float32)
        return self.corpus.encode(list(texts))

