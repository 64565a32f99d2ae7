"""Model-output parsers never raise on model text (only ValueError where documented)."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hippo_engine.index.nary import parse_nary
from hippo_engine.index.openie import parse_ner, parse_triples
from hippo_engine.retrieve.recognition import parse_fact_list
from hippo_engine.text import parse_json_lenient

JSONISH = st.lists(st.sampled_from(['[', ']', '{', '}', '"', ',', ':', ' ', 'a', '1', 'null', '"x"', '\\',
                                    '"named_entities"', '"triples"', '```json', '\n']), max_size=300).map("".join)
DEEP = st.integers(1, 20000).map(lambda n: "[" * n) | st.integers(1, 5000).map(lambda n: '{"a":' * n)
TEXT = st.text(max_size=400) | JSONISH | DEEP


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_parsers_never_raise_on_model_text(text):
    assert isinstance(parse_ner(text), list)
    assert isinstance(parse_triples(text), list)
    parse_nary(text)                         # never raises: errors are in the result
    for f in (parse_json_lenient, parse_fact_list):
        try:
            f(text)
        except ValueError:
            pass


@pytest.mark.parametrize("n", [1000, 100_000])
def test_deep_nesting_is_refused_not_recursed(n):
    with pytest.raises(ValueError, match="deeper than"):
        parse_json_lenient("[" * n)
    assert parse_ner('{"named_entities": ' + "[" * n) == []
