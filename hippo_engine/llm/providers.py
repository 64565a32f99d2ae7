"""The models of one engine, made on first use: :class:`Models`.

The LLM client (OpenIE, recognition filter, reader, community reports) and the text encoder are
made when first asked for, from their names and the configuration, so opening an index to read
statistics loads nothing. Components receive the zero-argument providers ``models.llm`` and
``models.encoder`` (bound methods).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hippo_engine.llm import factory
from hippo_engine.llm.base import LLMClient
from hippo_engine.models.assets import DEFAULT_EMBEDDER, DEFAULT_LLM
from hippo_engine.progress import Progress

if TYPE_CHECKING:
    from hippo_engine.config import HippoConfig
    from hippo_engine.models.encoder import Encoder


def default_names() -> tuple[str, str]:
    """The packaged LLM's and embedder's names."""
    return DEFAULT_LLM, DEFAULT_EMBEDDER


class Models:
    """The engine's LLM client and encoder (``llm_client``/``encoder_model``: given ones, or None
    until made), named ``llm_name`` and ``embedding_name`` (default: a given model's name, else
    the packaged one's); ``config`` is read when a model is made (``cache_dir``: the LLM cache)."""

    def __init__(self, config: HippoConfig, cache_dir: Path, llm_name: str | None = None,
                 embedding_name: str | None = None, llm: LLMClient | None = None, encoder: Encoder | None = None):
        default_llm, default_embedder = default_names()
        self.config, self.cache_dir = config, cache_dir
        self.llm_name = llm_name or (llm.model_name if llm is not None else default_llm)
        self.embedding_name = embedding_name or (encoder.name if encoder is not None else default_embedder)
        self.llm_client, self.encoder_model = llm, encoder

    def llm(self) -> LLMClient:
        """The LLM client, made on first use (``models.llm`` is the provider components get)."""
        if self.llm_client is None:
            self.llm_client = factory.make_llm(self.llm_name, self.config, cache_dir=self.cache_dir)
        return self.llm_client

    def encoder(self) -> Encoder:
        """The text encoder (``encoder.encode(texts) -> (n, dim) float32``), made on first use."""
        if self.encoder_model is None:
            from hippo_engine.models.encoder import TransformersEncoder
            cfg = self.config
            with Progress.of(cfg).loading(f"embedding model {self.embedding_name}"):
                self.encoder_model = TransformersEncoder(self.embedding_name, batch_size=cfg.embedding_batch_size,
                                                         dtype=cfg.embedding_dtype, max_length=cfg.embedding_max_length,
                                                         num_workers=cfg.embedding_num_workers)
        return self.encoder_model


class Forwarded:
    """An attribute read and written on a component: ``_llm = Forwarded("models", "llm_client")``
    keeps ``engine._llm = client`` (tests, scripts) meaning what it meant before ``Models``."""

    def __init__(self, component: str, name: str):
        self.component, self.name = component, name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(getattr(obj, self.component), self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(getattr(obj, self.component), self.name, value)
