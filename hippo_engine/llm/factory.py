"""``make_llm``: the one place that picks and builds the engine's LLM client."""
from __future__ import annotations

import logging
from pathlib import Path

from hippo_engine.config import HippoConfig
from hippo_engine.llm.base import LLMClient
from hippo_engine.models.assets import DEFAULT_LLM

logger = logging.getLogger(__name__)

CACHE_FILENAME = "llm_cache.sqlite"


def local_backend(model_name: str | None, config: HippoConfig) -> str:
    """``"llama_cpp"`` or ``"transformers"``: the backend a local ``model_name`` runs on."""
    if config.llm_backend != "auto":
        return config.llm_backend
    from hippo_engine.llm.llamacpp import REBUILD_HINT, llama_cpp_available, llama_cpp_has_amx, resolve_gguf
    if not llama_cpp_available() or resolve_gguf(model_name) == (None, None):
        return "transformers"
    if llama_cpp_has_amx():
        logger.warning("llama-cpp-python was built with Intel AMX kernels, which crash the process on some CPUs "
                       "of this kind: the local LLM runs on transformers instead (slower); %s", REBUILD_HINT)
        return "transformers"
    return "llama_cpp"


def make_llm(model_name: str | None, config: HippoConfig,
             cache_dir: str | Path | None = None) -> LLMClient:
    """Build the LLM client for ``model_name`` under ``config``.

    * ``model_name`` ``None`` means :data:`~hippo_engine.models.assets.DEFAULT_LLM`, the packaged
      Qwen2.5-Coder-0.5B-Instruct.
    * With ``config.llm_base_url`` set: an :class:`OpenAIClient` for that URL, sending
      ``model_name`` as the model (pass the name the server serves), with the config's key,
      timeout, retries and concurrency.
    * Otherwise a local model, loaded lazily on its first call: a :class:`LlamaCppClient` for a
      packaged model or ``.gguf`` file when ``config.llm_backend`` is ``"llama_cpp"``, or
      ``"auto"`` and ``llama-cpp-python`` is installed; else a :class:`LocalHFClient`
      (``transformers``; packaged name, local directory, ``.gguf`` file or hub name).

    With ``config.llm_cache`` and a ``cache_dir`` the client is wrapped in :class:`CachedLLM`
    at ``cache_dir/llm_cache.sqlite``.
    """
    name = model_name or DEFAULT_LLM
    client: LLMClient
    if config.llm_base_url:
        from hippo_engine.llm.openai_client import OpenAIClient
        client = OpenAIClient(name, base_url=config.llm_base_url, api_key=config.llm_api_key,
                              timeout=config.llm_timeout, max_retries=config.llm_max_retries,
                              max_concurrency=config.llm_max_concurrency,
                              temperature=config.temperature, max_new_tokens=config.max_new_tokens)
    elif local_backend(name, config) == "llama_cpp":
        from hippo_engine.llm.llamacpp import LlamaCppClient
        client = LlamaCppClient(name, temperature=config.temperature,
                                max_new_tokens=config.max_new_tokens, timeout=config.llm_timeout,
                                num_threads=config.llm_threads)
    else:
        from hippo_engine.llm.local import LocalHFClient
        client = LocalHFClient(name, temperature=config.temperature,
                               max_new_tokens=config.max_new_tokens, timeout=config.llm_timeout,
                               num_threads=config.llm_threads)
    client.show_progress = config.show_progress    # local models show a bar while they load
    if config.llm_cache:
        if cache_dir is None:
            logger.debug("llm_cache is on but no cache_dir was given; not caching")
        else:
            from hippo_engine.llm.cache import CachedLLM
            client = CachedLLM(client, Path(cache_dir) / CACHE_FILENAME)
    logger.info("LLM: %r", client)
    return client


__all__ = ["make_llm", "local_backend", "CACHE_FILENAME"]
