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

The retrieval settings ``second_hop``, ``second_hop_head``, ``dense_agree`` and ``dense_weight`` default to
``"auto"`` too, resolved per index by :func:`resolve_retrieval` from its extractor: on an ``extractor="ner"``
index the best measured LLM-free configuration (:data:`NER_RETRIEVAL`: a second walk seeded from the query's
two best sentences and one score per passage, the second walk's term plus the first walk's two best passages'
term plus dense retrieval's vote, ``retrieve/second/fusion.py``; ``reproduce/results/recall/README.md``), on
``openie``/``nary`` indexes the paper's one walk (:data:`PAPER_RETRIEVAL`). A value set explicitly is kept.
"""
from __future__ import annotations

from pathlib import Path

from hippo_engine.config import HippoConfig, RetrievalConfig
from hippo_engine.progress import announce

#: (save_dir, choice) pairs this process has announced (said once, not on every open)
_ANNOUNCED: set[str] = set()


#: ``"auto"`` retrieval settings on an ``extractor="ner"`` index: a second walk and one score of three terms
#: (``retrieve/second/fusion.py``; weights chosen on MuSiQue and the first half of the 2Wiki single-relation set,
#: checked on 2Wiki multi-hop and the second half: ``reproduce/results/recall/README.md``)
NER_RETRIEVAL: dict[str, object] = {"second_hop": "wide", "second_hop_head": 2, "dense_agree": 0, "dense_weight": 1.5}
#: ``"auto"`` retrieval settings on ``openie``/``nary`` indexes (and where the extractor is unknown): one walk
PAPER_RETRIEVAL: dict[str, object] = {"second_hop": "none", "second_hop_head": 2, "dense_agree": 0, "dense_weight": 0.0}


def resolve_retrieval(config: RetrievalConfig, extractor: str | None) -> RetrievalConfig:
    """``config`` with its ``"auto"`` retrieval settings (``second_hop``, ``second_hop_head``,
    ``dense_agree``, ``dense_weight``) resolved for an index of ``extractor``: :data:`NER_RETRIEVAL` on ``"ner"``,
    :data:`PAPER_RETRIEVAL` otherwise. Settings given explicitly are kept; unchanged when none is "auto"."""
    chosen = NER_RETRIEVAL if extractor == "ner" else PAPER_RETRIEVAL
    update = {k: v for k, v in chosen.items() if getattr(config, k) == "auto"}
    return config.model_copy(update=update) if update else config


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


__all__ = ["NER_RETRIEVAL", "PAPER_RETRIEVAL", "choose_extractor", "llm_configured", "resolve_auto",
           "resolve_retrieval"]
