"""``make_llm``: the one place that picks and builds the engine's LLM client."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional, Union

from ..config import HippoConfig
from ..model_assets import DEFAULT_LLM
from .base import LLMClient

logger = logging.getLogger(__name__)

CACHE_FILENAME = "llm_cache.sqlite"


def make_llm(model_name: Optional[str], config: HippoConfig,
             cache_dir: Union[str, Path, None] = None) -> LLMClient:
    """Build the LLM client for ``model_name`` under ``config``.

    * ``model_name`` ``None`` means :data:`~hippo_engine.model_assets.DEFAULT_LLM`, the packaged
      Qwen2.5-Coder-0.5B-Instruct.
    * With ``config.llm_base_url`` set: an :class:`OpenAIClient` for that URL, sending
      ``model_name`` as the model (pass the name the server serves), with the config's key,
      timeout, retries and concurrency.
    * Otherwise a :class:`LocalHFClient` (packaged name, local directory, ``.gguf`` file or hub
      name), loaded lazily on its first call.

    With ``config.llm_cache`` and a ``cache_dir`` the client is wrapped in :class:`CachedLLM`
    at ``cache_dir/llm_cache.sqlite``.
    """
    name = model_name or DEFAULT_LLM
    client: LLMClient
    if config.llm_base_url:
        from .openai_client import OpenAIClient
        client = OpenAIClient(name, base_url=config.llm_base_url, api_key=config.llm_api_key,
                              timeout=config.llm_timeout, max_retries=config.llm_max_retries,
                              max_concurrency=config.llm_max_concurrency,
                              temperature=config.temperature, max_new_tokens=config.max_new_tokens)
    else:
        from .local import LocalHFClient
        client = LocalHFClient(name, temperature=config.temperature,
                               max_new_tokens=config.max_new_tokens, timeout=config.llm_timeout)
    if config.llm_cache:
        if cache_dir is None:
            logger.debug("llm_cache is on but no cache_dir was given; not caching")
        else:
            from .cache import CachedLLM
            client = CachedLLM(client, Path(cache_dir) / CACHE_FILENAME)
    logger.info("LLM: %r", client)
    return client


__all__ = ["make_llm", "CACHE_FILENAME"]
