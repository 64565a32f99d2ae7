"""The consistency check of ``serve-load``: is every ``retrieve`` response one a committed version of the index
could have given, judged from the clients' own clocks?

Every request is recorded with the monotonic times it was sent and answered (:class:`Call`); every document
the writer client adds and deletes with the times of its add (sent, accepted), of the first job poll that saw
it indexed (answered) and of its delete (sent, answered) (:class:`DocTimes`). A document is deleted only
after its job was seen ``done``, so its delete returns after it left the index (a pending or claimed
document's removal may finish after the delete returns: that case is not exercised here). The rules:

* **status**: 200; a 5xx is a server error, any other status or a broken connection a failure as well;
* **well-formed**: ``top_k`` passages (the base corpus is larger), ranks 1..k, ids unique, each id the
  passage id of its text (``chunk_id``), scores finite and sorted best first;
* **known text**: each passage is a base passage (``doc_ids`` = its base document) or an added document's
  (``doc_ids`` = that document); never anything else;
* **no passage from the future or the past**: a passage of an added document appears only in a response
  answered after its add was sent, to a request sent before its delete was answered;
* **read after commit** (the probes: a ``naive`` query whose text is an added document's): when the probe
  was sent after the document was seen indexed and answered before its delete was sent, the document is in
  the top ``k`` (its own text is its nearest neighbour).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from hippo_engine.ids import chunk_id

#: violation examples kept in the report
EXAMPLES = 20


@dataclass
class Call:
    """One request of a reader client: what was asked (``probe``: the id of the added document whose text is
    the query, else None), when (monotonic seconds), the status (None: no response) and the passages."""

    query: str
    mode: str
    probe: str | None
    start: float
    end: float = math.nan
    status: int | None = None
    error: str | None = None
    passages: list[dict] = field(default_factory=list)


@dataclass
class DocTimes:
    """What the writer client saw of one added document (monotonic seconds; None: not (yet) happened)."""

    text: str
    add_sent: float | None = None
    add_ok: float | None = None
    indexed_seen: float | None = None
    delete_sent: float | None = None
    delete_ok: float | None = None


@dataclass
class Report:
    """Counts of a check and the first violations."""

    counts: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def violation(self, kind: str, call: Call, detail: str) -> None:
        self.counts["violations"] += 1
        self.counts[f"violation:{kind}"] += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(f"{kind}: {detail} (query {call.query[:60]!r}, sent {call.start:.3f}, "
                                 f"answered {call.end:.3f})")

    def as_dict(self) -> dict:
        return {"counts": dict(sorted(self.counts.items())), "statuses": dict(sorted(self.statuses.items())),
                "examples": list(self.examples)}


def check_calls(calls: list[Call], docs: dict[str, DocTimes], base: dict[str, str], top_k: int) -> Report:
    """Check every call (see the module's rules). ``base``: base passage text -> its document id;
    ``docs``: added document id -> its times."""
    rep = Report()
    added = {t.text: d for d, t in docs.items()}
    for call in calls:
        rep.counts["requests"] += 1
        rep.statuses["none" if call.status is None else str(call.status)] += 1
        if call.status is None:
            rep.counts["transport_errors"] += 1
            rep.violation("transport", call, call.error or "no response")
            continue
        if call.status >= 500:
            rep.counts["server_errors"] += 1
            rep.violation("server_error", call, f"status {call.status}: {call.error}")
            continue
        if call.status != 200:
            rep.counts["client_errors"] += 1
            rep.violation("status", call, f"status {call.status}: {call.error}")
            continue
        _check_shape(rep, call, top_k)
        shown = _check_passages(rep, call, docs, base, added)
        if call.probe is not None:
            _check_probe(rep, call, docs[call.probe], shown)
    return rep


def _check_shape(rep: Report, call: Call, top_k: int) -> None:
    ps = call.passages
    if len(ps) != top_k:
        rep.violation("count", call, f"{len(ps)} passages, {top_k} asked for")
    if [p.get("rank") for p in ps] != list(range(1, len(ps) + 1)):
        rep.violation("ranks", call, f"ranks {[p.get('rank') for p in ps]}")
    ids = [p.get("id") for p in ps]
    if len(set(ids)) != len(ids):
        rep.violation("duplicate", call, f"a passage id twice in {ids}")
    shown = [p.get("score") for p in ps]
    scores = [float(s) for s in shown if isinstance(s, int | float) and math.isfinite(s)]
    if len(scores) != len(shown):
        rep.violation("score", call, f"scores {shown}")
    elif any(a < b for a, b in zip(scores, scores[1:], strict=False)):
        rep.violation("order", call, f"scores not best first: {scores}")


def _check_passages(rep: Report, call: Call, docs: dict[str, DocTimes], base: dict[str, str],
                    added: dict[str, str]) -> set[str]:
    """Check each passage's identity and, for added documents, its time; returns the added ids shown."""
    shown: set[str] = set()
    for p in call.passages:
        text = p.get("text")
        if not isinstance(text, str) or p.get("id") != chunk_id(text):
            rep.violation("passage_id", call, f"id {p.get('id')!r} is not the id of its text")
            continue
        if text in base:
            rep.counts["base_passages"] += 1
            if p.get("doc_ids") != [base[text]]:
                rep.violation("doc_ids", call, f"base passage of {base[text]} shows doc_ids {p.get('doc_ids')}")
            continue
        doc = added.get(text)
        if doc is None:
            rep.violation("unknown_text", call, f"passage {p.get('id')} is neither a base nor an added document")
            continue
        rep.counts["added_passages"] += 1
        shown.add(doc)
        t = docs[doc]
        if p.get("doc_ids") != [doc]:
            rep.violation("doc_ids", call, f"passage of {doc} shows doc_ids {p.get('doc_ids')} (its delete sent "
                          f"{t.delete_sent}, answered {t.delete_ok})")
        if t.add_sent is None or call.end <= t.add_sent:
            rep.violation("before_add", call, f"{doc} shown before its add was sent ({t.add_sent})")
        if t.delete_ok is not None and call.start > t.delete_ok:
            rep.violation("after_delete", call, f"{doc} shown after its delete returned at {t.delete_ok:.3f}")
    return shown


def _check_probe(rep: Report, call: Call, t: DocTimes, shown: set[str]) -> None:
    doc = call.probe
    rep.counts["probes"] += 1
    if t.delete_ok is not None and call.start > t.delete_ok:
        rep.counts["probes_after_delete"] += 1
    required = t.indexed_seen is not None and call.start > t.indexed_seen and \
        (t.delete_sent is None or call.end < t.delete_sent)
    if not required:
        return
    rep.counts["probes_required"] += 1
    if doc in shown:
        rep.counts["probes_found"] += 1
    else:
        rep.violation("not_visible", call, f"{doc} seen indexed at {t.indexed_seen:.3f} is not in the top "
                      f"{len(call.passages)}")


__all__ = ["Call", "DocTimes", "Report", "check_calls"]
