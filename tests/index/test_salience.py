"""Topic entities of untitled passages (index/salience.py)."""
import pytest

from hippo_engine.datatypes import Hyperedge as H
from hippo_engine.index.salience import topic_entities, topic_entity


def test_central_is_the_entity_of_most_sentences_first_mention_on_ties():
    hs = [H("Ada met Bo in Rome.", ("ada", "bo", "rome")), H("Bo left.", ("bo",)), H("Ada stayed.", ("ada",))]
    assert topic_entity(hs, "central") == "ada"      # ada and bo: 2 sentences each; ada first
    hs.append(H("Bo came back.", ("bo",)))
    assert topic_entity(hs, "central") == "bo"


def test_first_is_the_first_entity_of_the_first_sentence_with_one():
    hs = [H("It rained.", ()), H("Ada met Bo.", ("ada", "bo")), H("Bo left.", ("bo",))]
    assert topic_entity(hs, "first") == "ada"
    assert topic_entity(hs, "central") == "bo"


def test_a_title_in_every_sentence_is_chosen_or_tied_with_an_entity_in_every_sentence():
    """On a titled passage the rule changes nothing a sentence links: the chosen entity is in every sentence."""
    hs = [H("Rome", ("rome",)), H("Rome is in Italy.", ("italy", "rome")), H("It has a port.", ("rome",))]
    t = topic_entity(hs, "central")
    assert t == "rome" and all(t in h.entities for h in hs)


def test_no_entity_and_bad_rule():
    assert topic_entity([H("Nothing here.", ())], "central") is None
    assert topic_entities({"p1": [H("x", ())], "p2": [H("Ada.", ("ada",))]}) == {"p2": "ada"}
    with pytest.raises(ValueError, match="central, first"):
        topic_entity([], "loudest")
