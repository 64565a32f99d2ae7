"""The configuration refuses bad values when built and cannot be changed in place."""
from __future__ import annotations

import math

import pytest

from hippo_engine import ConfigError, HippoConfig


@pytest.mark.parametrize("override, field", [
    ({"llm_timeout": math.nan}, "llm_timeout"),
    ({"temperature": math.nan}, "temperature"),
    ({"damping": math.inf}, "damping"),
    ({"extra": "notadict"}, "extra"),
    ({"damping": 7}, "damping"),
    ({"retrieval_top_k": 0}, "retrieval_top_k"),
])
def test_bad_values_are_refused_naming_the_field(override, field):
    with pytest.raises(ConfigError, match=field):
        HippoConfig().replace(**override)
    with pytest.raises(ConfigError, match=field):
        HippoConfig(**override)


def test_config_is_immutable_and_replace_makes_a_checked_copy():
    cfg = HippoConfig()
    with pytest.raises(ConfigError, match="immutable"):
        cfg.damping = 7
    with pytest.raises((ConfigError, TypeError, ValueError)):
        cfg.retrieval.damping = 7
    assert cfg.damping == 0.5
    changed = cfg.replace(damping=0.3)
    assert changed.damping == 0.3 and cfg.damping == 0.5


def test_unknown_field_is_refused():
    with pytest.raises(ConfigError, match="dampng"):
        HippoConfig(dampng=0.3)


def test_secrets_never_appear_in_reprs_or_errors():
    """The LLM API key and the DSN's password stay out of every repr and validation message."""
    from hippo_engine.config import HippoConfig
    cfg = HippoConfig(llm_api_key="sk-topsecret-123", postgres_dsn="postgresql://me:hunter2pw@db.example/x")
    for text in (repr(cfg), repr(cfg.llm), repr(cfg.storage), str(cfg.storage)):
        assert "sk-topsecret-123" not in text and "hunter2pw" not in text, text
    assert "me:***@db.example" in repr(cfg)
    with pytest.raises(ConfigError) as ei:
        HippoConfig(postgres_dsn="postgresql+psycopg://me:hunter2pw@db.example/x")
    assert "hunter2pw" not in str(ei.value) and "postgres_dsn" in str(ei.value)
