"""A single-relation development set from 2WikiMultihopQA's evidence triples (issue 38, point 1):
entity-centric simple questions such as "Who directed X?" or "When was X born?" over the 2Wiki corpus.

The rule (deterministic: the same questions file, corpus and ``seed`` give the same set, in the same order):

1. **Subjects.** Every evidence subject is mapped to one corpus title by the rules of
   :mod:`.evidence_gold` (the same two passes as :func:`~.evidence_gold.derive_gold`, per question, the
   question's text and its other triples used to disambiguate). A distinct triple ``(subject, relation,
   object)`` is kept when its subject got exactly one title, the same in every question holding the triple
   where it was matched; triples whose subject matched no title (or different titles) are dropped.
2. **Objects.** The object's page, where the corpus has one: the title the object gets from the strict rules
   (``exact``, then ``normalized``: fold-equal, one candidate), else the one title the object got as an
   evidence *subject* in step 1 (2Wiki's first-hop objects are the next hop's subjects, so this is the same
   locate rule, confirmed by a question). Dates and other literals have no page. The subject's own page is
   never its object's page.
3. **One question per (subject title, relation).** Triples of the same subject title and relation (two
   citizenships, two directors, two labels of one page) make one question; its objects are kept in the
   order they first appear in the file. Gold: the subject's page first, then each object's page (distinct).
4. **Wording.** :data:`TEMPLATES` has 2-4 phrasings per relation; each question's phrasing is drawn by
   ``random.Random(f"{seed}|{subject title}|{relation}")`` (per question, so that the draw does not depend on
   the order of the other questions). The subject is named by its evidence label (its first in file
   order) when its page names it (the label, folded, is in the folded title or text) and no other corpus
   title folds to the same name once parentheticals are removed (the label "Get Carter" with pages "Get
   Carter" and "Get Carter (2000 film)"); otherwise by its title. A relation
   without templates is an error (:class:`KeyError` naming it).
5. **Halves and order.** The distinct subject titles, sorted, are shuffled with ``random.Random(seed)``;
   taken in that order, subjects go to the first half until it holds at least half of the questions, the
   rest to the second: no subject is in both halves. The questions are ordered by their subject's place in
   the shuffle, then by relation name (so the first half is a prefix).

:func:`gold_kinds` counts the gold kinds (the subject's page; the answer entity's page) per half. Standard
library only, pure functions.
"""
from __future__ import annotations

import dataclasses
import random
from collections import Counter, defaultdict
from collections.abc import Sequence

from .evidence_gold import Resolver, TitleIndex, clean_name, evidence_of, fold, resolve_questions, strip_parens

#: the seed of :func:`build` unless told otherwise
SEED = 38

#: relation -> phrasings (``{s}``: the subject's name); every relation of 2Wiki's evidence triples
TEMPLATES: dict[str, tuple[str, ...]] = {
    "director": ("Who directed {s}?", "Who is the director of {s}?", "Which director made {s}?"),
    "date of birth": ("When was {s} born?", "What is {s}'s date of birth?", "What is the date of birth of {s}?"),
    "father": ("Who is the father of {s}?", "Who was {s}'s father?", "Who is {s}'s father?"),
    "date of death": ("When did {s} die?", "What is {s}'s date of death?", "What is the date of death of {s}?"),
    "country of citizenship": ("What country is {s} a citizen of?", "What is {s}'s country of citizenship?",
                               "Of which country is {s} a citizen?"),
    "publication date": ("When was {s} released?", "What is the publication date of {s}?",
                         "When was {s} published?"),
    "place of birth": ("Where was {s} born?", "What is {s}'s place of birth?", "In what place was {s} born?"),
    "spouse": ("Who is the spouse of {s}?", "Who was {s} married to?", "Who is {s}'s spouse?"),
    "place of death": ("Where did {s} die?", "What is {s}'s place of death?", "In what place did {s} die?"),
    "mother": ("Who is the mother of {s}?", "Who was {s}'s mother?", "Who is {s}'s mother?"),
    "country of origin": ("What is the country of origin of {s}?", "Which country is {s} from?",
                          "In which country did {s} originate?"),
    "country": ("In which country is {s}?", "What country is {s} in?", "Which country is {s} located in?"),
    "composer": ("Who composed {s}?", "Who is the composer of {s}?", "Who wrote the music for {s}?"),
    "performer": ("Who performed {s}?", "Who is the performer of {s}?", "Which artist performed {s}?"),
    "educated at": ("Where was {s} educated?", "Which school did {s} attend?", "Where did {s} study?"),
    "place of burial": ("Where is {s} buried?", "What is {s}'s place of burial?", "Where was {s} buried?"),
    "inception": ("When was {s} founded?", "When was {s} established?", "What is the inception date of {s}?"),
    "employer": ("Who is {s}'s employer?", "Who employed {s}?", "Where did {s} work?"),
    "award received": ("What award did {s} receive?", "Which award has {s} received?",
                       "What award was {s} given?"),
    "child": ("Who is a child of {s}?", "Who is {s}'s child?", "Who are the children of {s}?"),
    "sibling": ("Who is a sibling of {s}?", "Who is {s}'s sibling?", "Who is the brother or sister of {s}?"),
    "cause of death": ("What did {s} die of?", "What was {s}'s cause of death?",
                       "What is the cause of death of {s}?"),
    "founded by": ("Who founded {s}?", "Who is the founder of {s}?", "Who established {s}?"),
    "producer": ("Who produced {s}?", "Who is the producer of {s}?", "Who was the producer of {s}?"),
    "publisher": ("Who published {s}?", "Who is the publisher of {s}?", "Which company published {s}?"),
    "place of detention": ("Where was {s} detained?", "What is {s}'s place of detention?",
                           "Where was {s} imprisoned?"),
    "editor": ("Who edited {s}?", "Who is the editor of {s}?", "Who was the editor of {s}?"),
}


@dataclasses.dataclass(frozen=True)
class Item:
    """One generated question: its text, the fact behind it and its gold pages (titles; the subject's first)."""

    question: str
    subject: str                 # the evidence label the question names (or the title, see rule 4)
    relation: str
    objects: tuple[str, ...]     # the evidence objects (answers)
    subject_title: str
    object_titles: tuple[str, ...]
    half: str                    # "first" or "second"

    @property
    def gold_titles(self) -> tuple[str, ...]:
        """The subject's page, then the answer entities' pages."""
        return (self.subject_title, *self.object_titles)

    @property
    def id(self) -> str:
        """A stable id: the subject title and the relation."""
        return f"{self.subject_title}|{self.relation}"


def subject_titles(questions: Sequence[dict], index: TitleIndex) -> dict[tuple[str, str, str], str]:
    """Rule 1: distinct triple -> its subject's one title (triples matched to none or several left out)."""
    found: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for q, r in zip(questions, resolve_questions(questions, Resolver(index)), strict=True):
        titles_of = r[0]
        for s, rel, o in evidence_of(q):
            if len(titles_of.get(s, ())) == 1:
                found[(s, rel, o)].add(titles_of[s][0])
    return {t: next(iter(ts)) for t, ts in found.items() if len(ts) == 1}


def object_title(obj: str, res: Resolver, as_subject: dict[str, str]) -> str | None:
    """Rule 2: the object's page title, or ``None``."""
    return res.strict(obj) or as_subject.get(obj)


def _name(label: str, title: str, index: TitleIndex) -> str:
    """Rule 4: the label, or the title when the page does not name the label or another page's title
    folds to the label's name."""
    label = clean_name(label)
    key, folded = fold(strip_parens(label)), fold(label)
    others = [t for t in index.by_key.get(key, []) + index.by_fold.get(folded, []) if t != title]
    page = f" {index.folded[title]} {fold(index.doc[title].partition(chr(10))[2])} "
    return title if others or f" {folded} " not in page else label


def _facts(questions: Sequence[dict], index: TitleIndex) -> dict[tuple[str, str], dict]:
    """Rules 1-3: (subject title, relation) -> its first label and its objects with their pages, file order."""
    subj = subject_titles(questions, index)
    labels: dict[str, set[str]] = defaultdict(set)
    for (s, _, _), t in subj.items():
        labels[s].add(t)
    as_subject = {s: next(iter(ts)) for s, ts in labels.items() if len(ts) == 1}
    res = Resolver(index)
    facts: dict[tuple[str, str], dict] = {}
    for q in questions:
        for s, rel, o in evidence_of(q):
            title = subj.get((s, rel, o))
            if title is None:
                continue
            f = facts.setdefault((title, rel), {"label": s, "objects": [], "titles": []})
            if o not in f["objects"]:
                f["objects"].append(o)
            ot = object_title(o, res, as_subject)
            if ot is not None and ot != title and ot not in f["titles"]:
                f["titles"].append(ot)
    return facts


def split_subjects(counts: dict[str, int], seed: int) -> list[list[str]]:
    """Rule 5: the subjects (title -> its question count), shuffled by ``seed``, cut into two lists
    where the first first holds at least half of the questions."""
    order = sorted(counts)
    random.Random(seed).shuffle(order)
    total, acc, cut = sum(counts.values()), 0, len(order)
    for i, s in enumerate(order):
        acc += counts[s]
        if 2 * acc >= total:
            cut = i + 1
            break
    return [order[:cut], order[cut:]]


def build(questions: Sequence[dict], docs: Sequence[str], seed: int = SEED) -> list[Item]:
    """The development set of the 2Wiki-style ``questions`` (dicts with ``evidence`` triples) over the
    corpus ``docs`` (``"title\\ntext"``), by the rule of the module docstring."""
    index = TitleIndex(docs)
    facts = _facts(questions, index)
    missing = sorted({rel for _, rel in facts} - set(TEMPLATES))
    if missing:
        raise KeyError(f"no question templates for relation(s) {missing}")
    per_subject = Counter(title for title, _ in facts)
    halves = split_subjects(dict(per_subject), seed)
    items = []
    for half, subjects in zip(("first", "second"), halves, strict=True):
        for title in subjects:
            for rel in sorted(r for t, r in facts if t == title):
                f = facts[(title, rel)]
                name = _name(f["label"], title, index)
                template = random.Random(f"{seed}|{title}|{rel}").choice(TEMPLATES[rel])
                items.append(Item(template.format(s=name), name, rel, tuple(f["objects"]), title,
                                  tuple(f["titles"]), half))
    return items


def gold_docs(items: Sequence[Item], docs: Sequence[str]) -> list[list[str]]:
    """Per item, its gold passages (strings of ``docs``), subject's page first."""
    by_title = {d.partition("\n")[0]: d for d in docs}
    return [[by_title[t] for t in it.gold_titles] for it in items]


def gold_kinds(items: Sequence[Item]) -> dict[str, dict[str, int]]:
    """Gold kinds per half and ``all``: questions, subject pages, answer pages, questions with an answer page."""
    out: dict[str, dict[str, int]] = {}
    for key in ("first", "second", "all"):
        part = [it for it in items if key in ("all", it.half)]
        out[key] = {"questions": len(part), "subjects": len({it.subject_title for it in part}),
                    "subject_pages": len(part), "answer_pages": sum(len(it.object_titles) for it in part),
                    "with_answer_page": sum(1 for it in part if it.object_titles)}
    return out


def relation_counts(items: Sequence[Item]) -> dict[str, dict[str, int]]:
    """Per relation: questions and those whose answer has a page."""
    out: dict[str, dict[str, int]] = defaultdict(lambda: {"questions": 0, "with_answer_page": 0})
    for it in items:
        out[it.relation]["questions"] += 1
        out[it.relation]["with_answer_page"] += int(bool(it.object_titles))
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["questions"]))


__all__ = ["SEED", "TEMPLATES", "Item", "build", "gold_docs", "gold_kinds", "object_title", "relation_counts",
           "split_subjects", "subject_titles"]
