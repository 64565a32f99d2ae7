"""Text encoders. ``Encoder`` is the interface; ``TransformersEncoder`` the implementation."""
from __future__ import annotations

import json
import logging
import math
import os
from abc import ABC, abstractmethod
from typing import Optional, Sequence

import numpy as np


class Encoder(ABC):
    """Maps texts to L2-normalised float32 vectors of size ``dim``."""

    name: str
    dim: int

    @abstractmethod
    def encode(self, texts: Sequence[str], *, instruction: Optional[str] = None,
               show_progress: bool = False, desc: str = "Encoding") -> np.ndarray:
        """Return an array of shape (len(texts), dim), dtype float32, rows of unit length."""


# --------------------------------------------------------------------------------------------
# Hugging Face transformers implementation
# --------------------------------------------------------------------------------------------

logger = logging.getLogger(__name__)

_DTYPES = ("float32", "bfloat16")
#: Hard cap when neither a sentence-transformers config nor a sane tokenizer limit is known.
_MAX_LENGTH_CAP = 512
#: Every matrix multiplication is given at least this many rows (batch * tokens).
#: With torch 2.13's MKL/oneDNN on x86-64 (AVX2), sgemm with fewer than 12 rows takes kernels
#: whose rounding differs from the large-M kernel (measured: M in {1,2,3,5,6,7,9,10,11} with
#: 2 or 8 threads, {1,2,3} with 1, 3 or 4 threads; every M from 12 to 2100 gives results
#: bit-identical to each other and across thread counts). Padding tiny batches with
#: throw-away copies keeps every text on the large-M kernel, so its vector does not depend
#: on how many other texts share its batch. 16 leaves a margin over 12; a larger floor costs
#: latency on single short queries (the floor's rows are computed and thrown away).
_MIN_GEMM_ROWS = 16


def _looks_like_local_path(name: str) -> bool:
    """True when ``name`` is clearly meant as a filesystem path rather than a hub id."""
    return (os.path.isabs(name) or name.startswith(("./", "../", "~", ".\\", "..\\"))
            or name in (".", "..") or name.count("/") > 1 or (os.sep != "/" and os.sep in name))


def _read_st_max_seq_length(path: str) -> Optional[int]:
    """``max_seq_length`` from a sentence-transformers ``sentence_bert_config.json``, if any.

    Looks in a local directory; for a hub id it tries the local HF cache / hub (honouring
    ``HF_HUB_OFFLINE``) and silently gives up on any failure.
    """
    cfg_path: Optional[str] = None
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


class TransformersEncoder(Encoder):
    """Sentence encoder on top of a Hugging Face ``AutoModel``: mean pooling + L2 normalisation.

    This reproduces sentence-transformers models such as ``all-MiniLM-L6-v2`` (the default)
    and ``all-mpnet-base-v2`` without depending on sentence-transformers at run time.

    Batching. All texts of one :meth:`encode` call are tokenized once, grouped by *exact*
    token length and run in batches of at most ``batch_size`` texts of that one length.
    Batches therefore carry no padding at all (short entity strings never pay for a long
    neighbour), and the attention mask is all ones. Rows are returned in input order.

    Determinism. A text's vector is bit-identical whatever else is encoded in the same call
    (alone, together with others, in any order, with any ``batch_size``), for a fixed
    model, dtype, ``max_length``, machine and library build. Two ingredients make this so:
    (1) no padding, so attention never sees a different padded length; (2) every matrix
    multiplication gets at least ``_MIN_GEMM_ROWS`` rows: small batches are padded with
    throw-away copies of their first text, because BLAS uses differently-rounding kernels
    for very small row counts. Beyond that threshold oneDNN/MKL compute each output row
    independently of the others and of the thread count (verified on AVX2; other ISAs or
    BLAS builds are checked by ``tests/test_embedding.py``).

    Instructions. ``encode(texts, instruction=...)`` prepends the instruction verbatim:
    the model sees ``f"{instruction}{text}"`` — include any separator yourself
    (e.g. ``"Represent this question for retrieving passages: "``). The default models
    were trained without instructions, so the engine leaves it ``None`` for them.

    Args:
        model_name_or_path: a name accepted by
            :func:`hippo_engine.model_assets.resolve_embedding_model` (``None`` = the
            packaged ``all-MiniLM-L6-v2``), a local directory, or a hub id.
        batch_size: maximum number of texts per forward pass.
        dtype: ``"float32"`` or ``"bfloat16"`` (model weights/activations in bf16; pooling
            and normalisation in float32).
        max_length: truncation length in tokens (special tokens included). ``None`` =
            ``max_seq_length`` from the model's ``sentence_bert_config.json`` when present
            (256 for all-MiniLM-L6-v2), else the tokenizer's ``model_max_length`` capped
            at 512.
        device: torch device string, e.g. ``"cpu"`` or ``"cuda"``.
        num_threads: if given, calls ``torch.set_num_threads`` (process-wide!).
    """

    def __init__(self, model_name_or_path: Optional[str] = None, *, batch_size: int = 64,
                 dtype: str = "float32", max_length: Optional[int] = None, device: str = "cpu",
                 num_threads: Optional[int] = None) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        from hippo_engine.model_assets import DEFAULT_EMBEDDER, resolve_embedding_model

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
        if max_length is not None and max_length < 2:
            raise ValueError(f"max_length must be >= 2, got {max_length}")
        if num_threads is not None:
            if num_threads < 1:
                raise ValueError(f"num_threads must be >= 1, got {num_threads}")
            torch.set_num_threads(num_threads)

        self.name: str = model_name_or_path if model_name_or_path is not None else DEFAULT_EMBEDDER
        path = str(resolve_embedding_model(model_name_or_path))
        if not os.path.isdir(path):
            expanded = os.path.expanduser(path)
            if os.path.isdir(expanded):
                path = expanded
            elif _looks_like_local_path(path) or os.path.exists(expanded):
                raise FileNotFoundError(
                    f"embedding model {self.name!r}: {path!r} is not a directory with a "
                    f"transformers model (config.json, weights, tokenizer files)")
        self.path = path
        self.batch_size = int(batch_size)
        self.dtype = dtype
        self.device = torch.device(device)
        self._torch_dtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModel.from_pretrained(path)
        except OSError as e:
            where = "local directory" if os.path.isdir(path) else "hub id (or HF cache entry)"
            raise OSError(f"could not load embedding model {self.name!r} from {where} "
                          f"{path!r}: {e}") from e
        self.model = model.to(device=self.device, dtype=self._torch_dtype).eval()
        self.dim: int = int(self.model.config.hidden_size)

        if max_length is None:
            max_length = _read_st_max_seq_length(path)
            if max_length is None:
                tok_max = getattr(self.tokenizer, "model_max_length", None) or _MAX_LENGTH_CAP
                max_length = min(int(tok_max), _MAX_LENGTH_CAP)
        pos_max = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(pos_max, int) and pos_max > 0 and max_length > pos_max:
            logger.warning("max_length %d exceeds the model's max_position_embeddings %d; "
                           "using %d", max_length, pos_max, pos_max)
            max_length = pos_max
        self.max_length = int(max_length)

        self._pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self._use_token_type_ids = "token_type_ids" in getattr(self.tokenizer, "model_input_names", ())
        logger.info("loaded embedding model %s from %s (dim=%d, max_length=%d, dtype=%s, "
                    "device=%s, torch threads=%d)", self.name, path, self.dim, self.max_length,
                    dtype, self.device, torch.get_num_threads())

    def __repr__(self) -> str:
        return (f"TransformersEncoder(name={self.name!r}, dim={self.dim}, dtype={self.dtype!r}, "
                f"max_length={self.max_length}, batch_size={self.batch_size}, "
                f"device={str(self.device)!r})")

    # ---------------------------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str], *, instruction: Optional[str] = None) -> list[list[int]]:
        """Token ids (special tokens included, truncated to ``max_length``) for each text."""
        if instruction:
            texts = [f"{instruction}{t}" for t in texts]
        enc = self.tokenizer(list(texts), add_special_tokens=True, truncation=True,
                             max_length=self.max_length, padding=False,
                             return_attention_mask=False, return_token_type_ids=False)
        return enc["input_ids"]

    def plan_batches(self, lengths: Sequence[int]) -> list[np.ndarray]:
        """Group input positions into batches of equal token length, ``batch_size`` at most.

        Batches come in increasing length; within a length, input order is kept.
        """
        lengths = np.asarray(lengths, dtype=np.int64)
        order = np.argsort(lengths, kind="stable")
        batches: list[np.ndarray] = []
        if len(order) == 0:
            return batches
        sorted_lengths = lengths[order]
        cuts = np.flatnonzero(np.diff(sorted_lengths)) + 1
        for group in np.split(order, cuts):
            for start in range(0, len(group), self.batch_size):
                batches.append(group[start:start + self.batch_size])
        return batches

    def encode(self, texts: Sequence[str], *, instruction: Optional[str] = None,
               show_progress: bool = False, desc: str = "Encoding") -> np.ndarray:
        """Embed ``texts``; returns float32 array (len(texts), dim) of unit-length rows.

        ``instruction`` (optional) is prepended verbatim: the model sees
        ``f"{instruction}{text}"``. An empty input gives an array of shape (0, dim).
        """
        import torch

        if isinstance(texts, str):
            raise TypeError("encode() expects a sequence of strings, not a single string")
        n = len(texts)
        out = np.empty((n, self.dim), dtype=np.float32)
        if n == 0:
            return out
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"texts[{i}] is {type(t).__name__}, expected str")

        ids = self.tokenize(texts, instruction=instruction)
        batches = self.plan_batches([len(x) for x in ids])
        logger.debug("%s: %d texts in %d batches (%d distinct token lengths)", desc, n,
                     len(batches), len({len(x) for x in ids}))

        progress = None
        if show_progress:
            from tqdm.auto import tqdm
            progress = tqdm(total=len(batches), desc=desc, unit="batch")
        try:
            with torch.inference_mode():
                for idx in batches:
                    out[idx] = self._forward([ids[i] for i in idx])
                    if progress is not None:
                        progress.update(1)
        finally:
            if progress is not None:
                progress.close()
        return out

    def _forward(self, batch_ids: list[list[int]]) -> np.ndarray:
        """Embed one batch of equal-length token sequences (no padding needed)."""
        import torch

        n_real = len(batch_ids)
        length = len(batch_ids[0])
        n_rows = max(n_real, math.ceil(_MIN_GEMM_ROWS / length))
        input_ids = torch.tensor(batch_ids, dtype=torch.long)
        if n_rows > n_real:  # throw-away copies: keep BLAS on its large-M kernels
            input_ids = torch.cat([input_ids, input_ids[:1].expand(n_rows - n_real, -1)])
        input_ids = input_ids.to(self.device)
        inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if self._use_token_type_ids:
            inputs["token_type_ids"] = torch.zeros_like(input_ids)
        hidden = self.model(**inputs).last_hidden_state[:n_real].float()
        # Mean pooling over the attention mask; the mask is all ones (no padding), so this
        # is the plain mean over tokens.
        pooled = hidden.sum(dim=1) / float(length)
        pooled = torch.nn.functional.normalize(pooled, p=2.0, dim=-1)
        return pooled.cpu().numpy()
