"""Where a transformers encoder's model is, how long its inputs may be and what it accepts: :func:`model_path`
(a packaged name, a local folder or a hub id), :func:`max_length_of` (the truncation length) and the checks of
its settings and inputs (:func:`check_settings`, :func:`check_texts`), for
:class:`~hippo_engine.models.encoder.TransformersEncoder`."""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence

logger = logging.getLogger(__name__)

#: the encoder's dtypes
DTYPES = ("float32", "bfloat16")
#: Hard cap when neither a sentence-transformers config nor a sane tokenizer limit is known.
_MAX_LENGTH_CAP = 512


def looks_like_local_path(name: str) -> bool:
    """True when ``name`` is clearly meant as a filesystem path rather than a hub id."""
    return (os.path.isabs(name) or name.startswith(("./", "../", "~", ".\\", "..\\"))
            or name in (".", "..") or name.count("/") > 1 or (os.sep != "/" and os.sep in name))


def read_st_max_seq_length(path: str) -> int | None:
    """``max_seq_length`` from a sentence-transformers ``sentence_bert_config.json``, if any.

    Looks in a local directory; for a hub id it tries the local HF cache / hub (honouring
    ``HF_HUB_OFFLINE``) and silently gives up on any failure.
    """
    cfg_path: str | None = None
    if os.path.isdir(path):
        candidate = os.path.join(path, "sentence_bert_config.json")
        cfg_path = candidate if os.path.isfile(candidate) else None
    else:
        try:  # pragma: no cover - depends on the HF cache / network
            from huggingface_hub import hf_hub_download
            cfg_path = hf_hub_download(path, "sentence_bert_config.json")
        except Exception:  # noqa: BLE001 - any failure simply means "no such config"
            cfg_path = None
    if cfg_path is None:
        return None
    try:
        with open(cfg_path, encoding="utf-8") as f:
            value = json.load(f).get("max_seq_length")
    except (OSError, ValueError) as e:
        logger.warning("could not read %s: %s", cfg_path, e)
        return None
    return int(value) if isinstance(value, (int, float)) and value > 0 else None


def model_path(name: str, model_name_or_path: str | None) -> str:
    """The folder or hub id the model ``name`` loads from (:func:`.assets.resolve_embedding_model`,
    ``~`` expanded); a name that looks like a local path but is no folder is refused."""
    from hippo_engine.models.assets import resolve_embedding_model

    path = str(resolve_embedding_model(model_name_or_path))
    if not os.path.isdir(path):
        expanded = os.path.expanduser(path)
        if os.path.isdir(expanded):
            path = expanded
        elif looks_like_local_path(path) or os.path.exists(expanded):
            raise FileNotFoundError(
                f"embedding model {name!r}: {path!r} is not a directory with a "
                f"transformers model (config.json, weights, tokenizer files)")
    return path


def max_length_of(max_length: int | None, path: str, tokenizer, model_config) -> int:
    """The truncation length: the given one, else the sentence-transformers config's, else the
    tokenizer's limit capped at ``_MAX_LENGTH_CAP``; at most the model's position embeddings."""
    if max_length is None:
        max_length = read_st_max_seq_length(path)
        if max_length is None:
            tok_max = getattr(tokenizer, "model_max_length", None) or _MAX_LENGTH_CAP
            max_length = min(int(tok_max), _MAX_LENGTH_CAP)
    pos_max = getattr(model_config, "max_position_embeddings", None)
    if isinstance(pos_max, int) and pos_max > 0 and max_length > pos_max:
        logger.warning("max_length %d exceeds the model's max_position_embeddings %d; "
                       "using %d", max_length, pos_max, pos_max)
        max_length = pos_max
    return int(max_length)


__all__ = ["looks_like_local_path", "max_length_of", "model_path", "read_st_max_seq_length"]


def check_settings(batch_size: int, dtype: str, max_length: int | None, max_batch_tokens: int | None,
                    num_workers: int | None, num_threads: int | None) -> None:
    """Refuse an encoder setting out of range (``ValueError`` naming the first)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if max_length is not None and max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    if max_batch_tokens is not None and max_batch_tokens < 1:
        raise ValueError(f"max_batch_tokens must be >= 1, got {max_batch_tokens}")
    if num_workers is not None and num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    if num_threads is not None and num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")


def check_texts(texts: Sequence[str]) -> None:
    """Refuse a single string or a non-string item (``TypeError``)."""
    if isinstance(texts, str):
        raise TypeError("encode() expects a sequence of strings, not a single string")
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"texts[{i}] is {type(t).__name__}, expected str")
