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
