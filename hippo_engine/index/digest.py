"""A checksum of what the graph is built from, kept in the index database.

The graph (``graph.npz``) is derived from the passages, each passage's facts (triples or
hyperedges) and the synonymy lists. ``ContentDigest`` is an order-independent checksum of
exactly that: the sum, modulo 2**128, of a BLAKE2b hash per passage (its id and facts) and per
non-empty synonymy list (its source and entries). Being a sum, it is updated in proportion to
a change (add the new terms, subtract the removed ones), in the same transaction as the change
(meta key ``content_digest``), and equal content gives the same digest whatever the history.

``graph.npz`` records the digest it was built from; on load it must equal the database's, so a
graph file copied from another index (even one with the same version number) is detected and
rebuilt, at the cost of comparing two strings.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence

from hippo_engine.datatypes import Hyperedge

META_KEY = "content_digest"
_MOD = 1 << 128


def _term(kind: str, key: str, payload: list) -> int:
    data = json.dumps([kind, key, payload], separators=(",", ":")).encode("ascii")
    return int.from_bytes(hashlib.blake2b(data, digest_size=16).digest(), "big")


def passage_term(pid: str, triples: Sequence[Sequence[str]] | None, hyperedges: Sequence[Hyperedge] | None) -> int:
    """The term of one passage: its id and its facts in stored order."""
    return _term("passage", pid, [[list(t) for t in triples or ()],
                                  [[h.text, list(h.entities)] for h in hyperedges or ()]])


def synonymy_term(src: str, neighbours: Mapping[str, float] | None) -> int:
    """The term of one synonymy list (0 for an empty one); scores by their exact float value."""
    if not neighbours:
        return 0
    entries = "\x00".join([f"{d}\x01{float(w).hex()}" for d, w in sorted(neighbours.items())])
    data = f"synonymy\x02{src}\x02{entries}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=16).digest(), "big")


class ContentDigest:
    """The running checksum (see the module docstring)."""

    def __init__(self, value: int = 0):
        self.value = value % _MOD

    @classmethod
    def from_hex(cls, text: str) -> ContentDigest:
        return cls(int(text, 16))

    def hex(self) -> str:
        return f"{self.value:032x}"

    def add_passage(self, pid: str, triples, hyperedges) -> None:
        self.value = (self.value + passage_term(pid, triples, hyperedges)) % _MOD

    def remove_passage(self, pid: str, triples, hyperedges) -> None:
        self.value = (self.value - passage_term(pid, triples, hyperedges)) % _MOD

    def change_synonymy(self, changes: Mapping[str, tuple[Mapping[str, float] | None, Mapping[str, float] | None]]
                        ) -> None:
        """Apply ``{source: (old list, new list)}``."""
        for src, (old, new) in changes.items():
            self.value = (self.value - synonymy_term(src, old) + synonymy_term(src, new)) % _MOD


def content_digest(passage_ids: Iterable[str], passage_triples: Mapping[str, Sequence],
                   passage_hyperedges: Mapping[str, Sequence[Hyperedge]],
                   synonymy: Mapping[str, Mapping[str, float]]) -> str:
    """The digest of the given content, computed from scratch."""
    d = ContentDigest()
    for pid in passage_ids:
        d.add_passage(pid, passage_triples.get(pid), passage_hyperedges.get(pid))
    d.change_synonymy({src: (None, nb) for src, nb in synonymy.items()})
    return d.hex()
