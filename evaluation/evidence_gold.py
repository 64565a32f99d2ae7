"""Gold passages derived from 2WikiMultihopQA ``evidence`` triples (for question files without
``context`` / ``supporting_facts``, such as LinearRAG's copy of the HippoRAG 2 2Wiki questions).

In 2WikiMultihopQA every evidence triple ``[subject, relation, object]`` is a fact of the
Wikipedia page of its *subject*, and a question's supporting paragraphs are those subject pages:
compositional / inference (A -r1-> B, B -r2-> answer): A, B; comparison (A -r-> x, C -r-> y): A, C;
bridge_comparison (film1 -director-> P, film2 -director-> Q, P -r-> x, Q -r-> y): film1, film2, P, Q.
Objects are not gold: a first-hop object is the next hop's subject, and a final object (the
answer) is a distractor in 2Wiki even when the corpus has a page for it.

Subjects are Wikidata-style labels, not always page titles, so each triple's subject is mapped to
one corpus title by the first rule, in this order, that gives an accepted answer ("fold": NFKD
without accents, casefold, ``&`` -> ``and``, punctuation -> space, whitespace collapsed):

strict (accepted as is)
  1 ``exact``          the label is a title;
  2 ``normalized``     fold(label) == fold(title);
    ``named_variant``  overrides 1/2: the question names exactly one longer title containing the
                       label, and its passage supports the evidence strictly better
                       ("Get Carter" -> "Get Carter (2000 film)");
confirmed (accepted only if the pick is confirmed, else the next rule is tried)
  3 ``paren``          equal after removing parentheticals on both sides;
  4 ``comma_head``     the title before its first comma equals the label, or the reverse;
  5 ``text_prefix``    the passage's first sentence starts with the label ("Edsel Bryant Ford");
  6 ``chain``          a later hop whose previous-hop object is another label that is a title;
  7 ``question_title`` a title the question names sharing a content word (>= 4 letters) with the
                       label, or whose first 250 characters contain it;
  8 ``tokens``         label words subset of title words or the reverse, sharing a content word;
  9 ``fuzzy``          edit distance <= 2 (<= 1 for short labels);
 10 ``text_mention``   the passage's first 250 characters contain the label;
 11 ``same_label``     (second pass) the single title the same label got in other questions.

Several candidates are narrowed by (a) the question naming the title (longest occurrence wins),
(b) evidence support (best share of an evidence object's folded words found in the passage),
(c) the chain title; a rule is used only if exactly one candidate is left (``+disamb`` in the
counts). A pick is *confirmed* when the question names its title, the passage contains every word
of one of the subject's evidence objects, or it is the chain title. Titles taken by the question's
other subjects, and the previous hop's title, are never candidates. Corpus order is never used.
Standard library only.
"""
from __future__ import annotations

import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

STRICT_RULES = ("exact", "normalized")
CONFIRMED_RULES = ("paren", "comma_head", "text_prefix", "chain", "question_title", "tokens", "fuzzy",
                   "text_mention", "same_label")
_PAREN = re.compile(r"\s*\([^()]*\)")
_NONWORD = re.compile(r"[^\w\s]")


def fold(s: str) -> str:
    """Accent-, case-, punctuation- and whitespace-insensitive form of ``s``."""
    s = "".join(ch for ch in unicodedata.normalize("NFKD", s) if not unicodedata.combining(ch))
    s = _NONWORD.sub(" ", s.casefold().replace("&", " and ")).replace("_", " ")
    return " ".join(s.split())


def strip_parens(s: str) -> str:
    """``s`` without parentheticals: "Geoffrey III (died 1202), Count" -> "Geoffrey III, Count"."""
    prev = None
    while prev != s:
        prev, s = s, _PAREN.sub("", s)
    return " ".join(s.replace(" ,", ",").split())


def clean_name(name: str) -> str:
    """A label without stray quotes / whitespace (2Wiki has '"B Boy', ' Sila')."""
    return name.strip().strip('"\u201c\u201d').strip()


def _tokens(s: str) -> set[str]:
    return set(fold(s).split())


def _content(folded: str) -> set[str]:
    return {t for t in folded.split() if len(t) >= 4}


def _has(haystack_folded: str, needle_folded: str) -> bool:
    """Whether the folded phrase occurs in the folded text at word boundaries."""
    return bool(needle_folded) and f" {needle_folded} " in f" {haystack_folded} "


def named_in_question(qfold: str, titles: Iterable[str], folded: dict[str, str]) -> list[str]:
    """The titles the folded question names, longest first, each occurrence used once ("...
    Seven Women (1944 Film)" names the 1944 film, not the bare title inside it). Titles that fold
    alike are all returned, so they stay ambiguous."""
    groups: dict[str, list[str]] = defaultdict(list)
    for t in titles:
        if folded[t]:
            groups[folded[t]].append(t)
    work, out = f" {qfold} ", []
    for f in sorted(groups, key=lambda f: (-len(f), f)):
        if f" {f} " in work:
            out.extend(sorted(groups[f]))
            work = work.replace(f" {f} ", " | ")
    return out


def _edit_distance(a: str, b: str, limit: int) -> int:
    """Levenshtein distance, or ``limit + 1`` once it exceeds ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        if min(cur) > limit:
            return limit + 1
        prev = cur
    return prev[-1]


class TitleIndex:
    """Lookups from labels to corpus titles (titles must be unique)."""

    def __init__(self, docs: Iterable[str]):
        self.doc: dict[str, str] = {}
        self.text_tokens: dict[str, set[str]] = {}
        self.text_head: dict[str, str] = {}   # folded first 250 characters of the text
        self.folded: dict[str, str] = {}      # folded title
        self.key: dict[str, str] = {}         # folded title without parentheticals
        self.by_fold: dict[str, list[str]] = defaultdict(list)
        self.by_key: dict[str, list[str]] = defaultdict(list)
        self.by_head: dict[str, list[str]] = defaultdict(list)  # key cut at the first comma
        for d in docs:
            title, _, text = d.partition("\n")
            if self.doc.get(title) == d:
                continue
            if title in self.doc:
                raise ValueError(f"duplicate corpus title {title!r}: evidence-derived gold would be ambiguous")
            self.doc[title] = d
            self.text_tokens[title] = _tokens(text)
            self.text_head[title] = fold(text[:250])
            self.folded[title] = fold(title)
            self.by_fold[self.folded[title]].append(title)
            plain = strip_parens(title)
            self.key[title] = fold(plain)
            self.by_key[self.key[title]].append(title)
            head = fold(plain.split(",", 1)[0])
            if head != self.key[title]:
                self.by_head[head].append(title)

    def candidates(self, rule: str, name: str, question: str = "") -> list[str]:
        """The titles rule ``rule`` offers for the label ``name``."""
        name = clean_name(name)
        f, key = fold(name), fold(strip_parens(name))
        if rule == "exact":
            return [name] if name in self.doc else []
        if rule == "normalized":
            return list(self.by_fold.get(f, []))
        if rule == "paren":
            return sorted(set(self.by_key.get(key, [])))
        if rule == "comma_head":
            out = list(self.by_head.get(key, []))
            head = fold(strip_parens(name).split(",", 1)[0])
            if head != key:  # the label has a descriptive part after a comma
                out += self.by_key.get(head, [])
            return sorted(set(out))
        if rule == "text_prefix":
            return [] if len(f) < 4 else sorted(
                t for t, h in self.text_head.items() if h == f or h.startswith(f + " "))
        if rule == "question_title":
            qf, ct = fold(question), _content(f)
            return sorted(t for t, tf in self.folded.items() if len(tf) >= 3 and _has(qf, tf)
                          and (ct & _content(tf) or _has(self.text_head[t], f)))
        if rule == "tokens":
            toks, ct = set(key.split()), _content(key)
            if not ct:
                return []
            split = ((t, set(k.split())) for t, k in self.key.items())
            return sorted(t for t, tt in split if (toks <= tt or tt <= toks) and ct & tt)
        if rule == "fuzzy":
            if len(key) < 6:
                return []
            limit = 2 if len(key) >= 10 else 1
            return sorted(t for t, k in self.key.items() if k != key and _edit_distance(key, k, limit) <= limit)
        if rule == "text_mention":
            return [] if len(f) < 5 else sorted(t for t, h in self.text_head.items() if _has(h, f))
        raise ValueError(rule)

    def support(self, title: str, objects: Iterable[str]) -> float:
        """Best share of an evidence object's words found in the title's passage."""
        tt = self.text_tokens[title]
        return max((len(ot & tt) / len(ot) for ot in map(_tokens, objects) if ot), default=0.0)


def chain_sources(evidence: Sequence[Sequence[str]], qtype: str) -> dict[int, int | None]:
    """Per triple, the earlier triple whose object is this triple's subject entity (the previous
    hop), or ``None`` for a first hop. compositional / inference: 1 <- 0; bridge_comparison:
    triples 0 and 1 are the first hops, the distinct later subjects are their objects in order."""
    out: dict[int, int | None] = dict.fromkeys(range(len(evidence)))
    if qtype in ("compositional", "inference") and len(evidence) == 2:
        out[1] = 0
    elif qtype == "bridge_comparison" and len(evidence) >= 4:
        later = list(dict.fromkeys(t[0] for t in evidence[2:]))
        if len(later) == 2 and evidence[0][0] != evidence[1][0]:
            for i in range(2, len(evidence)):
                out[i] = later.index(evidence[i][0])
    return out


class Resolver:
    """Maps one evidence subject to one corpus title (rules in the module docstring)."""

    def __init__(self, index: TitleIndex):
        self.ix = index
        self._named: dict[str, list[str]] = {}

    def named_titles(self, question: str) -> list[str]:
        """The corpus titles the question names (maximal occurrences), cached per question."""
        if question not in self._named:
            qf = fold(question)
            hits = [t for t, f in self.ix.folded.items() if len(f) >= 3 and _has(qf, f)]
            self._named[question] = named_in_question(qf, hits, self.ix.folded)
        return self._named[question]

    def _narrow(self, cands: list[str], qfold: str, objects: list[str], chain_title: str | None) -> list[str]:
        """Disambiguators (a) named by the question, (b) evidence support, (c) chain title."""
        if len(cands) <= 1:
            return cands
        named = named_in_question(qfold, cands, self.ix.folded)
        if len(named) == 1:
            return named
        cands = named or cands
        scores = {t: self.ix.support(t, objects) for t in cands}
        best = max(scores.values())
        if best > 0:
            cands = [t for t in cands if scores[t] == best]
            if len(cands) == 1:
                return cands
        return [chain_title] if chain_title in cands else cands

    def _confirmed(self, title: str, qfold: str, objects: list[str], chain_title: str | None) -> bool:
        return _has(qfold, self.ix.folded[title]) or self.ix.support(title, objects) >= 1.0 or title == chain_title

    def strict(self, name: str, question: str = "", exclude: frozenset = frozenset()) -> str | None:
        """The title ``name`` gets from the strict rules (disambiguated), or ``None``."""
        for rule in STRICT_RULES:
            cands = [t for t in self.ix.candidates(rule, name) if t not in exclude]
            if cands:
                n = self._narrow(cands, fold(question), [], None)
                return n[0] if len(n) == 1 else None
        return None

    def resolve(self, subject: str, objects: list[str], question: str, chain_obj: str | None,
                exclude: frozenset = frozenset(), label_hint: str | None = None) -> tuple[str | None, str, list[str]]:
        """``(title or None, rule, candidates)`` for one subject. ``objects``: its triples'
        objects; ``chain_obj``: the previous hop's object; ``exclude``: titles not allowed;
        ``label_hint``: the title this label got elsewhere (rule ``same_label``)."""
        qfold = fold(question)
        chain_title = None
        if chain_obj is not None and fold(chain_obj) != fold(subject):
            chain_title = self.strict(chain_obj, question, exclude)
        sf = fold(clean_name(subject))
        variants = [t for t in self.named_titles(question)
                    if t not in exclude and self.ix.folded[t] != sf and _has(self.ix.folded[t], sf)]
        for rule in STRICT_RULES:
            cands = [t for t in self.ix.candidates(rule, subject) if t not in exclude]
            if not cands:
                continue
            n = self._narrow(cands, qfold, objects, chain_title)
            if len(n) != 1:
                return None, "ambiguous", cands
            if len(variants) == 1 and self.ix.support(variants[0], objects) > self.ix.support(n[0], objects):
                return variants[0], "named_variant", cands + variants
            return n[0], rule if len(cands) == 1 else rule + "+disamb", cands
        tried: list[str] = []
        for rule in CONFIRMED_RULES:
            if rule == "chain":
                cands = [chain_title] if chain_title is not None else []
            elif rule == "same_label":
                cands = [label_hint] if label_hint is not None and label_hint not in exclude else []
            else:
                cands = [t for t in self.ix.candidates(rule, subject, question) if t not in exclude]
                if rule == "question_title":
                    named = set(self.named_titles(question))
                    cands = [t for t in cands if t in named]
            if not cands:
                continue
            tried.extend(c for c in cands if c not in tried)
            n = self._narrow(cands, qfold, objects, chain_title)
            if len(n) == 1 and self._confirmed(n[0], qfold, objects, chain_title):
                return n[0], rule if len(cands) == 1 else rule + "+disamb", cands
        return None, ("unconfirmed" if tried else "unmatched"), tried


def _resolve_question(q: dict, res: Resolver, hints: dict[str, str]) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Resolve each evidence triple's subject in evidence order: ``(label -> titles, label ->
    rule)``; the rule is that of the label's first successful triple (else its first triple)."""
    ev = evidence_of(q)
    sources = chain_sources(ev, q.get("question_type", ""))
    objects_of: dict[str, list[str]] = defaultdict(list)
    for s, _, o in ev:
        objects_of[s].append(o)
    titles_of: dict[str, list[str]] = {s: [] for s in dict.fromkeys(t[0] for t in ev)}
    triple_title: list[str | None] = [None] * len(ev)
    rule_of: dict[str, str] = {}
    for i, (s, _, _) in enumerate(ev):
        src = sources[i]
        exclude = {t for n, ts in titles_of.items() if n != s for t in ts}
        if src is not None and triple_title[src] is not None:
            exclude.add(triple_title[src])
        title, rule, _ = res.resolve(s, objects_of[s], q.get("question", ""), ev[src][2] if src is not None else None,
                                     frozenset(exclude), hints.get(s))
        triple_title[i] = title
        if title is not None and title not in titles_of[s]:
            titles_of[s].append(title)
        if s not in rule_of or (title is not None and rule_of[s] in _FAILED):
            rule_of[s] = rule
    return titles_of, rule_of


_FAILED = ("ambiguous", "unconfirmed", "unmatched")


def evidence_of(q: dict) -> list[list[str]]:
    """The question's ``[subject, relation, object]`` triples (other entries ignored)."""
    ev = q.get("evidence") or []
    return [[str(x) for x in t] for t in ev if isinstance(t, (list, tuple)) and len(t) == 3]


def has_evidence_only(q: dict) -> bool:
    """The format rule "evidence-derived gold": ``evidence`` triples and no paragraphs / contexts /
    context to read gold passages from."""
    return bool(evidence_of(q)) and not any(k in q for k in ("paragraphs", "contexts", "context"))


def derive_gold(questions: Sequence[dict], docs: Sequence[str]) -> tuple[list[list[str]], dict]:
    """Gold passages (strings of ``docs``, ``"title\\ntext"``) for each question from its evidence.

    Call it once for all questions of a file: rule ``same_label`` uses the whole set.
    Returns ``(gold, stats)``: ``gold[i]`` holds the passages of question ``i``'s distinct
    subjects that were matched, in evidence order (partial when some are not);
    ``stats``: ``rules`` (counts per distinct (question, subject) pair, failures as
    ``unmatched``), ``complete`` (per question: every subject matched), ``coverage`` (per
    ``question_type`` and ``all``: questions / complete), ``gold_sizes`` (per type: size ->
    questions) and ``unmatched`` (examples: id, subject, reason)."""
    res = Resolver(TitleIndex(docs))
    results = resolve_questions(questions, res)

    gold: list[list[str]] = []
    complete: list[bool] = []
    rules: Counter = Counter()
    coverage: dict[str, Counter] = defaultdict(Counter)
    sizes: dict[str, Counter] = defaultdict(Counter)
    unmatched: list[dict] = []
    for q, (titles_of, rule_of) in zip(questions, results, strict=True):
        docs_q = list(dict.fromkeys(res.ix.doc[t] for s, _, _ in evidence_of(q) for t in titles_of[s]))
        ok = bool(titles_of) and all(titles_of.values())
        qtype = str(q.get("question_type", "unknown"))
        for s, ts in titles_of.items():
            rules["unmatched" if not ts else rule_of[s]] += 1
            if not ts:
                unmatched.append({"id": q.get("id", q.get("_id")), "subject": s, "reason": rule_of[s]})
        gold.append(docs_q)
        complete.append(ok)
        for key in (qtype, "all"):
            coverage[key]["questions"] += 1
            coverage[key]["complete"] += int(ok)
        sizes[qtype][len(docs_q)] += 1
    stats = {"rules": dict(rules.most_common()), "complete": complete,
             "coverage": {t: dict(c) for t, c in sorted(coverage.items())},
             "gold_sizes": {t: dict(sorted(c.items())) for t, c in sorted(sizes.items())},
             "unmatched": unmatched}
    return gold, stats


__all__ = ["TitleIndex", "Resolver", "chain_sources", "derive_gold", "evidence_of", "fold", "has_evidence_only",
           "strip_parens"]


def resolve_questions(questions: Sequence[dict], res: Resolver) -> list:
    """Each question's subjects resolved in two passes: alone, then (where a subject matched nothing) with the
    titles that other questions matched to the same subject string unambiguously as hints."""
    first = [_resolve_question(q, res, {}) for q in questions]
    seen: dict[str, set[str]] = defaultdict(set)
    for titles_of, _ in first:
        for s, ts in titles_of.items():
            seen[s].update(ts)
    hints = {s: next(iter(ts)) for s, ts in seen.items() if len(ts) == 1}
    return [r if all(r[0].values()) else _resolve_question(q, res, hints)
            for q, r in zip(questions, first, strict=True)]
