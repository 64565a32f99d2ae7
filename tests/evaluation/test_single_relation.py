"""The single-relation development set (issue 38): the generation rule on a small synthetic corpus
(subjects, answer pages, merging, wording, halves, determinism) and on the shared 2Wiki file."""
import json
from collections import Counter
from pathlib import Path

import pytest

from hippo_engine.evaluation.datasets import corpus_docs
from hippo_engine.evaluation.evidence_gold import evidence_of
from hippo_engine.evaluation.single_relation import (
    SEED,
    TEMPLATES,
    build,
    gold_docs,
    gold_kinds,
    relation_counts,
    split_subjects,
)

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "2wikimultihopqa"

PAGES = {
    "Lothair II": "Lothair II was a king. His mother was Ermengarde of Tours.",
    "Ermengarde of Tours": "Ermengarde of Tours died on 20 March 851.",
    "Get Carter": "Get Carter is a 1971 British crime film directed by Mike Hodges.",
    "Get Carter (2000 film)": "Get Carter is a 2000 American action film directed by Stephen Kay.",
    "Mike Hodges": "Mike Hodges is an English film director.",
    "Edsel Ford": "Edsel Bryant Ford was an American businessman, son of Henry Ford.",
    "Henry Ford": "Henry Ford was an American industrialist, born in Springwells.",
    "Phoolwari": "Phoolwari is a film directed by Zabou Breitman and Jean Dupont.",
    "Zabou Breitman": "Zabou Breitman is a French director.",
    "Jean Dupont": "Jean Dupont is a French director.",
}
DOCS = [f"{t}\n{x}" for t, x in PAGES.items()]


def q(qid, question, evidence, qtype="compositional"):
    return {"id": qid, "question": question, "answer": "x", "question_type": qtype, "evidence": evidence}


QUESTIONS = [
    q("a", "When did Lothair II's mother die?",
      [["Lothair II", "mother", "Ermengarde of Tours"], ["Ermengarde of Tours", "date of death", "20 March 851"]]),
    q("b", "Who is the father of the director of Get Carter (2000 film)?",
      [["Get Carter (2000 film)", "director", "Stephen Kay"], ["Stephen Kay", "father", "Nobody"]]),
    q("c", "Where was the father of Edsel Bryant Ford born?",
      [["Edsel Bryant Ford", "father", "Henry Ford"], ["Henry Ford", "place of birth", "Springwells"]]),
    q("d", "Who directed Get Carter?", [["Get Carter", "director", "Mike Hodges"]], "comparison"),
    q("e", "Who directed Phoolwari?", [["Phoolwari", "director", "Zabou Breitman"],
                                       ["Phoolwari", "director", "Jean Dupont"]], "comparison"),
    q("f", "Who directed Phoolwari?", [["Phoolwari", "director", "Zabou Breitman"]], "comparison"),
    q("g", "When was Nowhere Man born?", [["Nowhere Man", "date of birth", "1900"]], "comparison"),
]


def by_fact(items):
    return {(it.subject_title, it.relation): it for it in items}


def test_gold_is_the_subjects_page_then_the_answer_entitys_page():
    items = by_fact(build(QUESTIONS, DOCS))
    lothair = items[("Lothair II", "mother")]
    assert lothair.gold_titles == ("Lothair II", "Ermengarde of Tours")        # the object is a title (exact)
    assert lothair.objects == ("Ermengarde of Tours",)
    assert items[("Ermengarde of Tours", "date of death")].gold_titles == ("Ermengarde of Tours",)   # a date
    assert items[("Get Carter", "director")].gold_titles == ("Get Carter", "Mike Hodges")
    assert items[("Get Carter (2000 film)", "director")].object_titles == ()   # Stephen Kay has no page
    assert ("Nowhere Man", "date of birth") not in items                       # no page for the subject
    assert ("Stephen Kay", "father") not in items
    # Edsel Bryant Ford -> Edsel Ford by the evidence rules; Henry Ford is an exact title
    assert items[("Edsel Ford", "father")].gold_titles == ("Edsel Ford", "Henry Ford")
    assert items[("Henry Ford", "place of birth")].object_titles == ()
    docs = gold_docs([lothair], DOCS)
    assert docs == [[DOCS[0], DOCS[1]]]


def test_one_question_per_subject_and_relation_with_every_object():
    items = build(QUESTIONS, DOCS)
    phool = [it for it in items if it.subject_title == "Phoolwari"]
    assert len(phool) == 1
    assert phool[0].objects == ("Zabou Breitman", "Jean Dupont")
    assert phool[0].gold_titles == ("Phoolwari", "Zabou Breitman", "Jean Dupont")
    assert len({it.question for it in items}) == len(items) == len({it.id for it in items})


def test_an_object_page_found_as_another_questions_subject():
    qs = [q("x", "Who is the father of Edsel Bryant Ford's son?", [["Benson Ford", "father", "Edsel Bryant Ford"]]),
          *QUESTIONS]
    docs = [*DOCS, "Benson Ford\nBenson Ford was a son of Edsel Ford."]
    items = by_fact(build(qs, docs))
    # "Edsel Bryant Ford" is no title, but question c maps the subject label to Edsel Ford
    assert items[("Benson Ford", "father")].gold_titles == ("Benson Ford", "Edsel Ford")


def test_wording_names_the_label_or_the_title_when_the_label_is_ambiguous():
    items = by_fact(build(QUESTIONS, DOCS))
    assert items[("Edsel Ford", "father")].subject == "Edsel Bryant Ford"        # the page names the label
    assert items[("Lothair II", "mother")].question in [t.format(s="Lothair II") for t in TEMPLATES["mother"]]
    # "Get Carter" is the key of two titles: the question names the exact title
    assert items[("Get Carter", "director")].subject == "Get Carter"
    carter = items[("Get Carter (2000 film)", "director")]
    assert carter.subject == "Get Carter (2000 film)"
    assert "Get Carter (2000 film)" in carter.question


def test_templates_cover_relations_and_read_as_questions():
    for rel, ts in TEMPLATES.items():
        assert 2 <= len(ts) <= 4 and len(set(ts)) == len(ts), rel
        for t in ts:
            assert t.count("{s}") == 1 and t.endswith("?"), (rel, t)
    with pytest.raises(KeyError, match="occupation"):
        build([q("z", "What does Lothair II do?", [["Lothair II", "occupation", "king"]])], DOCS)


def test_same_seed_same_output_other_seed_other_draws():
    a, b = build(QUESTIONS, DOCS), build(list(QUESTIONS), list(DOCS))
    assert a == b
    draws = {tuple(it.question for it in build(QUESTIONS, DOCS, seed=s)) for s in range(20)}
    assert len(draws) > 1                                                    # the seed chooses the wording
    firsts = {frozenset(it.subject_title for it in build(QUESTIONS, DOCS, seed=s) if it.half == "first")
              for s in range(20)}
    assert len(firsts) > 1                                                   # and the halves


def test_halves_are_disjoint_by_subject_and_the_first_is_a_prefix():
    for seed in (SEED, 1, 2, 3):
        items = build(QUESTIONS, DOCS, seed=seed)
        first = {it.subject_title for it in items if it.half == "first"}
        second = {it.subject_title for it in items if it.half == "second"}
        assert first and second and not first & second
        halves = [it.half for it in items]
        assert halves == sorted(halves)                                     # "first" < "second": a prefix
        assert 2 * halves.count("first") >= len(items)
    assert split_subjects({"a": 1, "b": 1, "c": 1, "d": 1}, 0) == split_subjects({"d": 1, "c": 1, "b": 1, "a": 1}, 0)
    first, second = split_subjects({"a": 3, "b": 1}, 0)
    assert sorted(first + second) == ["a", "b"] and len(first) == 1


def test_gold_kinds_count_subject_and_answer_pages():
    items = build(QUESTIONS, DOCS)
    kinds = gold_kinds(items)
    assert kinds["all"]["questions"] == len(items) == kinds["first"]["questions"] + kinds["second"]["questions"]
    assert kinds["all"]["subject_pages"] == len(items)
    assert kinds["all"]["answer_pages"] == sum(len(it.object_titles) for it in items) == 5
    assert kinds["all"]["with_answer_page"] == 4
    assert relation_counts(items)["director"] == {"questions": 3, "with_answer_page": 2}


@pytest.fixture(scope="module")
def real():
    qpath, cpath = DATA / "linearrag_format" / "questions.json", DATA / "2wikimultihopqa_corpus.json"
    if not (qpath.is_file() and cpath.is_file()):
        pytest.skip(f"the shared 2Wiki data is not at {DATA} (see ../shared/data/SOURCES.md)")
    samples = json.loads(qpath.read_text(encoding="utf-8"))
    docs = corpus_docs(json.loads(cpath.read_text(encoding="utf-8")))
    return samples, docs, build(samples, docs)


def test_the_real_set(real):
    samples, docs, items = real
    relations = Counter(t[1] for s in samples for t in evidence_of(s))
    assert set(relations) <= set(TEMPLATES)                                 # every relation has templates
    assert len(items) >= 1000 and len({it.question for it in items}) == len(items)
    kinds = gold_kinds(items)
    assert kinds["first"]["questions"] >= kinds["second"]["questions"] >= 1000 // 2
    assert not ({it.subject_title for it in items if it.half == "first"}
                & {it.subject_title for it in items if it.half == "second"})
    titles = {d.partition("\n")[0] for d in docs}
    assert all(set(it.gold_titles) <= titles and it.subject_title not in it.object_titles for it in items)
    assert kinds["all"]["with_answer_page"] > 500                            # directors, parents, spouses...
    assert [it.question for it in items[:3]] == [it.question for it in build(samples, docs)[:3]]
