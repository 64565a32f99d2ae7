"""``extractor="auto"``: the best measured configuration for what the user has, chosen when an index
is created and recorded in it.

* No LLM server configured (no ``llm_base_url``, no ``llm=`` client; the packaged local model does
  not count): the graph is built without any LLM, ``extractor="ner"`` (spaCy entities, sentences as
  facts), linked with ``ner_fact`` and without the recognition filter (both ``"auto"`` choices on such
  an index). On our data it beats the paper's OpenIE run on the packaged 0.5B model in recall, and
  indexes in seconds instead of hours (README, "Memory without an LLM").
* An OpenAI-compatible server configured (or a client passed): the paper's configuration, LLM
  OpenIE triples with the recognition filter.

An index that already records its extractor keeps it, whatever is configured now; an index written
before extractors were recorded holds OpenIE triples. :func:`resolve_auto` is the one place that
decides, so a better measured default changes here.
"""
from __future__ import annotations

from pathlib import Path

from hippo_engine.config import HippoConfig
from hippo_engine.progress import announce

#: (save_dir, choice) pairs this process has announced (said once, not on every open)
_ANNOUNCED: set[str] = set()


def llm_configured(config: HippoConfig, llm: object | None = None) -> bool:
    """Whether an LLM server is configured: ``llm_base_url`` set, or an ``llm=`` client passed."""
    return bool(config.llm_base_url) or llm is not None


def resolve_auto(config: HippoConfig, llm_configured: bool) -> tuple[HippoConfig, str]:
    """``config`` with ``extractor="auto"`` resolved for a new index, and a sentence saying what was
    chosen and how to get the other configuration. Other extractors are returned unchanged (with "")."""
    if config.extractor != "auto":
        return config, ""
    if llm_configured:
        return config.replace(extractor="openie"), (
            "LLM server configured: building the graph with the paper's LLM OpenIE (extractor='openie') and "
            "the recognition filter; pass extractor='ner' for the faster LLM-free graph")
    return config.replace(extractor="ner"), (
        "no LLM server configured: building the graph without an LLM (extractor='ner': spaCy entities, "
        "sentences as facts, ner_fact linking, no recognition filter); pass extractor='openie' with "
        "llm_base_url=... for the paper's OpenIE")


def choose_extractor(config: HippoConfig, recorded: str | None, has_passages: bool, llm_configured: bool,
                     save_dir: Path) -> HippoConfig:
    """The configuration an opened index runs with: an explicit extractor as given; ``"auto"``: the
    extractor the index records (``"openie"`` for passages written before it was recorded), or for an
    empty index :func:`resolve_auto`'s choice, announced once per folder and process (INFO on the
    progress logger: the command line prints it on stderr)."""
    if config.extractor != "auto":
        return config
    if recorded is not None or has_passages:
        return config.replace(extractor=recorded or "openie")
    config, note = resolve_auto(config, llm_configured)
    key = f"{Path(save_dir).resolve()}:{config.extractor}"
    if key not in _ANNOUNCED:
        _ANNOUNCED.add(key)
        announce(f"{save_dir}: {note}")
    return config


__all__ = ["choose_extractor", "llm_configured", "resolve_auto"]
