"""The LLM section of the configuration: timeout and concurrency defaults from the environment."""
import pytest

from hippo_engine.config import ConfigError, HippoConfig


def test_defaults_are_600s_and_8_in_flight(monkeypatch):
    monkeypatch.delenv("HIPPO_LLM_TIMEOUT", raising=False)
    monkeypatch.delenv("HIPPO_LLM_CONCURRENCY", raising=False)
    cfg = HippoConfig()
    assert cfg.llm_timeout == 600.0 and cfg.llm_max_concurrency == 8


def test_environment_sets_the_defaults_and_explicit_values_win(monkeypatch):
    monkeypatch.setenv("HIPPO_LLM_TIMEOUT", "45.5")
    monkeypatch.setenv("HIPPO_LLM_CONCURRENCY", "2")
    cfg = HippoConfig()
    assert cfg.llm_timeout == 45.5 and cfg.llm_max_concurrency == 2
    assert "llm_timeout=45.5" in repr(cfg)
    cfg = HippoConfig(llm_timeout=3.0, llm_max_concurrency=1)
    assert cfg.llm_timeout == 3.0 and cfg.llm_max_concurrency == 1


@pytest.mark.parametrize(("name", "value"), [("HIPPO_LLM_TIMEOUT", "soon"), ("HIPPO_LLM_TIMEOUT", "0"),
                                             ("HIPPO_LLM_TIMEOUT", "inf"), ("HIPPO_LLM_CONCURRENCY", "2.5"),
                                             ("HIPPO_LLM_CONCURRENCY", "-1")])
def test_bad_environment_values_name_the_variable(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=f"environment variable {name}.*{value!r}"):
        HippoConfig()
