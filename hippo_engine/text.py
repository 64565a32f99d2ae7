"""Ids, phrase normalisation and tolerant JSON parsing of model output (pure functions)."""
from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import json_repair

#: A fact: (subject, predicate, object). The one definition; every module imports it from here.
Triple = tuple[str, str, str]


class Hyperedge(NamedTuple):
    """An n-ary fact: a sentence (``extractor="ner"``) or an LLM knowledge segment
    (``extractor="nary"``) linked to every normalised entity it mentions. Its fact id is
    ``mdhash_id(text, "fact-")`` and ``text`` is what the fact store embeds."""

    text: str
    entities: tuple[str, ...]


def hyperedges_by_id(passage_hyperedges: Mapping[str, Iterable[Hyperedge]]) -> dict[str, Hyperedge]:
    """fact id -> hyperedge over all passages (first occurrence wins; equal texts share an id)."""
    out: dict[str, Hyperedge] = {}
    for hs in passage_hyperedges.values():
        for h in hs:
            out.setdefault(mdhash_id(h.text, "fact-"), h)
    return out


def hyperedge_triple(h: Hyperedge) -> Triple:
    """How a hyperedge is shown where a triple is expected (candidate facts, the recognition
    filter): ``(text, "mentions", "entity; entity; ...")``."""
    return (h.text, "mentions", "; ".join(h.entities))


#: co-occurrence weights are rounded to multiples of this, so sums are exact in any order
WEIGHT_QUANTUM = 2.0 ** -20


def hyperedge_graph_triples(hyperedges: Sequence[Hyperedge], cooccurrence: bool = True
                            ) -> tuple[list[Triple], list[float]]:
    """How the graph sees a passage's hyperedges, as pseudo-triples and their fact weights.

    Every mentioned entity gives ``(e, "", e)`` (a passage-entity context edge; self-loops are
    never graph edges). With ``cooccurrence``, each hyperedge of ``m`` entities adds its
    entities as a clique, ``1 / (m - 1)`` per pair (so a hyperedge adds weight 1 to each of its
    entities however many it links), rounded to a multiple of ``WEIGHT_QUANTUM`` so that sums
    do not depend on insertion order.
    """
    ents = list(dict.fromkeys(e for h in hyperedges for e in h.entities))
    triples: list[Triple] = [(e, "", e) for e in ents]
    weights = [0.0] * len(ents)
    if cooccurrence:
        for h in hyperedges:
            m = len(h.entities)
            if m < 2:
                continue
            w = round(1.0 / (m - 1) / WEIGHT_QUANTUM) * WEIGHT_QUANTUM
            for i in range(m):
                for j in range(i + 1, m):
                    triples.append((h.entities[i], "", h.entities[j]))
                    weights.append(w)
    return triples, weights


_REFERENCE_NON_ALNUM = re.compile(r"[^a-z0-9 ]")
_SPACES = re.compile(r"\s+")
_ALNUM_ANY = re.compile(r"[^\W_]", re.UNICODE)


def mdhash_id(text: str, prefix: str = "") -> str:
    """``prefix + md5(text)``: the reference implementation's ids (``chunk-``, ``entity-``, ``fact-``)."""
    return prefix + hashlib.md5(text.encode("utf-8")).hexdigest()


def normalize_phrase(text: str, mode: str = "unicode") -> str:
    """Normalise an entity phrase.

    ``"reference"``: lowercase, every character outside ``[a-z0-9 ]`` becomes a space, strip
    (HippoRAG's rule; it maps non-Latin text to the empty string).
    ``"unicode"`` (default): lowercase, keep letters and digits of any script, everything else
    becomes a space, collapse runs of spaces, strip. Marks of scripts such as Devanagari are
    kept with their letters.
    """
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    if mode == "reference":
        return _REFERENCE_NON_ALNUM.sub(" ", text.lower()).strip()
    if mode != "unicode":
        raise ValueError(f"unknown normalisation {mode!r}")
    text = unicodedata.normalize("NFC", text).lower()
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] in "LN" or cat in ("Mn", "Mc"):
            out.append(ch)
        else:
            out.append(" ")
    return _SPACES.sub(" ", "".join(out)).strip()


def alnum_count(text: str) -> int:
    """Number of letters/digits (any script) in ``text``."""
    return len(_ALNUM_ANY.findall(text))


def fact_text(triple: tuple[str, str, str]) -> str:
    """How a fact is rendered for its id and embedding: the reference's tuple repr,
    e.g. ``"('radio city', 'located in', 'india')"``, so reference ids carry over."""
    return repr(tuple(triple))


def facts_by_id(passage_triples) -> dict[str, tuple[str, str, str]]:
    """fact id -> triple for every triple of ``passage_triples`` (passage id -> triples); a
    fact stated by several passages appears once."""
    out: dict[str, tuple[str, str, str]] = {}
    for ts in passage_triples.values():
        for t in ts:
            out.setdefault(mdhash_id(fact_text(t), "fact-"), t)
    return out


# --------------------------------------------------------------------------- JSON repair
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)(?:```|$)", re.DOTALL)


def json_events(text: str) -> Iterator[tuple[int, str]]:
    """The structure of JSON-like text, one pass, strings skipped: ``(position, event)`` with event
    ``[ { ] } ,`` (outside strings), ``"`` (a string opens) or ``S`` (a string closes)."""
    in_str = esc = False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
                yield i, "S"
        elif ch == '"':
            in_str = True
            yield i, '"'
        elif ch in "[{]},":
            yield i, ch


def _close_truncated(s: str) -> str | None:
    """Cut ``s`` after its last complete JSON value inside a container and close what is open:
    remembers the position after the last complete element (a closed string in a list, a closed
    bracket, or a scalar followed by ``,``)."""
    stack: list[str] = []
    last_good = -1  # index after which the text is a prefix ending on a complete element
    good_stack: list[str] = []
    for i, ev in json_events(s):
        if ev == "S":
            if stack and stack[-1] == "[":   # a list element (not an object key) is complete
                last_good, good_stack = i, stack.copy()
        elif ev in "[{":
            stack.append(ev)
        elif ev in "]}":
            if not stack:
                break
            stack.pop()
            last_good, good_stack = i, stack.copy()
            if not stack:
                return s[: i + 1]
        elif ev == "," and stack:
            last_good, good_stack = i - 1, stack.copy()
    if last_good < 0:
        return None
    head = s[: last_good + 1].rstrip().rstrip(",")
    closers = "".join("]" if c == "[" else "}" for c in reversed(good_stack))
    return head + closers


def json_depth(text: str) -> int:
    """The deepest bracket nesting of ``text`` (strings skipped, brackets not matched)."""
    depth = deepest = 0
    for m in re.finditer(r'"(?:[^"\\]|\\.)*"?|[\[{]|[\]}]', text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok in "]}":
            depth = max(depth - 1, 0)
    return deepest


#: model output nested deeper than this is garbage (replies nest a few levels); it is refused
#: before any parser sees it (Python's json recursion would raise RecursionError on it)
MAX_JSON_DEPTH = 64


#: longer replies are not handed to ``json_repair`` (about 4 s at 640k characters of an unterminated
#: string, growing faster than linearly); model replies are a few thousand characters
MAX_REPAIR_CHARS = 100_000


def parse_json_lenient(text: str) -> Any:
    """Parse JSON from model output: code fences, leading prose, truncation and the usual
    malformations tolerated (truncation: cut after the last complete item and close what is
    open, spec section 1; the rest: ``json_repair``).

    Returns the parsed value or raises ``ValueError``. Never evaluates the text as code.
    """
    if text is None:
        raise ValueError("no text")
    if json_depth(text) > MAX_JSON_DEPTH:
        raise ValueError(f"model output nests brackets deeper than {MAX_JSON_DEPTH} levels: not read")
    candidates = []
    m = _FENCE.search(text)
    if m:
        candidates.append(m.group(1))
    candidates.append(text)
    for cand in candidates:
        start = min((p for p in (cand.find("{"), cand.find("[")) if p >= 0), default=-1)
        if start < 0:
            continue
        body = cand[start:].strip()
        try:
            return json.loads(body)
        except (json.JSONDecodeError, RecursionError):
            pass
        try:  # valid JSON followed by trailing chatter
            value, _ = json.JSONDecoder().raw_decode(body)
            return value
        except (json.JSONDecodeError, RecursionError):
            pass
        repaired = _close_truncated(body)
        if repaired is not None:
            try:
                return json.loads(repaired)
            except (json.JSONDecodeError, RecursionError):
                pass
        # other malformations (single quotes, trailing commas, bare keys, comments): json_repair.
        # It runs last because it keeps a truncated final item ("Ca" of "Cairo"), which the
        # truncation rule above drops.
        if len(body) > MAX_REPAIR_CHARS:   # json_repair is superlinear on long unterminated strings
            continue
        try:
            value = json_repair.loads(body)
        except Exception:  # noqa: BLE001 - a third-party parser on arbitrary text: any failure (it has
            continue       # tripped its own assert on '{"```json{```') means "cannot be read"
        if isinstance(value, (dict, list)) and value:
            return value
    raise ValueError(f"could not parse JSON from model output: {text[:200]!r}")
