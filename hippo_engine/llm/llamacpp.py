"""A local GGUF chat model run by ``llama-cpp-python`` (the optional ``fast`` extra).

It runs the packaged Q4_K_M GGUF as it is (no de-quantisation), several times faster on a CPU
than the ``transformers`` path of :class:`~hippo_engine.llm.local.LocalHFClient`, and reuses the
evaluated prompt prefix between calls (OpenIE and filter prompts share long instructions).

Install with ``pip install "hippo-engine[fast]"`` (builds llama.cpp from source: a C/C++
compiler and CMake are needed, a few minutes on 2 cores). Without it the engine falls back to
the ``transformers`` backend (``HippoConfig.llm_backend = "auto"``).
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hippo_engine.llm import cancel
from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse, LLMTimeoutError, Message
from hippo_engine.llm.streaming import TextPieces, current_sink
from hippo_engine.models.assets import PackagedLLM, find_packaged_llm, packaged_gguf
from hippo_engine.progress import Progress
from hippo_engine.system import usable_cpus

logger = logging.getLogger(__name__)


#: llama.cpp's system-info flag of its Intel AMX kernels. ggml's AMX matrix product kills the
#: process (SIGSEGV in ``ggml_backend_amx_mul_mat``) on some Sapphire Rapids-class machines, e.g.
#: this project's CI machines (llama.cpp issue 20824); a build made with ``-march=native`` on such
#: a CPU has them. The engine does not run such a build unless ``HIPPO_ENGINE_LLAMA_AMX=1`` says it
#: works on this machine.
AMX_FLAG = "AMX_INT8 = 1"
AMX_OPT_IN = "HIPPO_ENGINE_LLAMA_AMX"
#: a portable llama.cpp build (AVX2, no AMX), what the README's main command installs
PORTABLE_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
REBUILD_HINT = (f'rebuild it without them: CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}" pip install --force-reinstall '
                "--no-cache-dir --no-deps llama-cpp-python==0.3.36 (or set HIPPO_ENGINE_LLAMA_AMX=1 if it works here)")


def llama_cpp_has_amx() -> bool:
    """Whether the installed llama.cpp would run its Intel AMX kernels (imports ``llama_cpp``);
    False with ``HIPPO_ENGINE_LLAMA_AMX=1`` (the user checked that they work on this machine)."""
    if os.environ.get(AMX_OPT_IN) == "1":
        return False
    try:
        import llama_cpp
        info = llama_cpp.llama_print_system_info()
    except Exception:  # noqa: BLE001 - not installed or not loadable: no AMX kernels to fear
        return False
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    return AMX_FLAG in text


def llama_cpp_available() -> bool:
    """Whether ``llama_cpp`` can be imported (without importing it twice)."""
    import importlib.util
    return importlib.util.find_spec("llama_cpp") is not None



def default_threads() -> int:
    """CPU threads for llama.cpp: the usable CPUs minus those other processes keep busy (1-minute
    load average), at least 1. llama.cpp threads wait for each other at every layer, so one thread
    that shares its core with another process slows the whole generation several times over."""
    n = usable_cpus()
    try:
        busy = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        busy = 0.0
    return max(1, min(n, int(n - busy + 0.5)))


def resolve_gguf(model: str | os.PathLike | None) -> tuple[PackagedLLM | None, Path | None]:
    """``(packaged spec, None)`` for a packaged model name, ``(None, path)`` for a ``.gguf``
    file, ``(None, None)`` for anything this backend cannot run."""
    if model is not None and Path(model).is_file() and str(model).endswith(".gguf"):
        return None, Path(model)
    if model is None or not Path(model).exists():
        spec = find_packaged_llm(None if model is None else str(model))
        if spec is not None:
            return spec, None
    return None, None


class LlamaCppClient(LLMClient):
    """A GGUF chat model on CPU through ``llama-cpp-python``.

    Args:
        model: a packaged model name or alias (``None``: the default packaged model) or a path
            to a ``.gguf`` file (its embedded chat template is used).
        temperature: default temperature; ``0`` is greedy decoding (deterministic).
        max_new_tokens: default cap on generated tokens.
        timeout: seconds one generation may run; a reply cut off by it raises
            :class:`LLMTimeoutError`. Loading is not counted.
        num_threads: CPU threads (``None``: env ``HIPPO_ENGINE_LLM_THREADS``, else
            :func:`default_threads` when the model loads: the CPUs not kept busy by others).
        n_ctx: context window in tokens (prompt + reply).
        seed: sampling seed (only matters with ``temperature > 0``).

    The model is loaded on the first ``generate`` (or :meth:`load`), so a client whose calls are
    all answered by a cache never loads it. One generation runs at a time (a lock).
    """

    max_concurrency = 1
    #: the reader's token cap with this client (``hippo_engine.qa.reader.reply_tokens``): room for a
    #: few short sentences of reasoning and the answer line; a small model that rambles stops here
    reader_reply_tokens = 256

    def __init__(self, model: str | os.PathLike | None = None, *, temperature: float = 0.0,
                 max_new_tokens: int = 2048, timeout: float = 120.0,
                 num_threads: int | None = None, n_ctx: int = 16384, seed: int = 0):
        self._spec, self._gguf = resolve_gguf(model)
        if self._spec is None and self._gguf is None:
            raise LLMError(f"the llama_cpp backend runs GGUF files; {model!r} is neither a packaged "
                           f"model nor a .gguf file (use llm_backend='transformers' for it)")
        self.model_name = self._spec.name if self._spec is not None else str(self._gguf)
        if timeout is None or timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")
        self.default_temperature = float(temperature)
        self.default_max_new_tokens = int(max_new_tokens)
        self.timeout = float(timeout)
        env_threads = os.environ.get("HIPPO_ENGINE_LLM_THREADS")
        self._fixed_threads = int(num_threads or env_threads or 0) or None
        self.num_threads = self._fixed_threads or usable_cpus()
        self.n_ctx = int(n_ctx)
        self.seed = int(seed)
        self._lock = threading.Lock()
        self._llm: Any = None
        self._weights_id: str | None = None
        self._chat_formatter: Any = None
        self.load_seconds: float | None = None

    def __repr__(self) -> str:
        return f"LlamaCppClient(model={self.model_name!r}, threads={self.num_threads})"

    # ------------------------------------------------------------------ loading
    @property
    def loaded(self) -> bool:
        return self._llm is not None

    def load(self) -> LlamaCppClient:
        with self._lock:
            self._ensure_loaded()
        return self

    def _weights(self) -> str:
        """A short id of the weights (the pinned digest, or size+mtime of a user file)."""
        if self._weights_id is None:
            if self._spec is not None:
                self._weights_id = self._spec.sha256[:16]
            else:
                gguf = self._gguf_path()
                st = gguf.stat()
                self._weights_id = hashlib.sha256(
                    f"{gguf.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
        return self._weights_id

    def _gguf_path(self) -> Path:
        """The user's GGUF file (set whenever no packaged model is)."""
        if self._gguf is None:   # pragma: no cover - __init__ refuses a model with neither
            raise LLMError(f"{self.model_name!r} has no GGUF file")
        return self._gguf

    def _ensure_loaded(self) -> None:
        if self._llm is not None:
            return
        try:
            from llama_cpp import Llama
        except ImportError as e:
            raise LLMError("llama-cpp-python is not installed: pip install 'hippo-engine[fast]', "
                           "or set llm_backend='transformers'") from e
        if llama_cpp_has_amx():
            raise LLMError("the installed llama-cpp-python was built with Intel AMX kernels, which crash the "
                           f"process on some CPUs of this kind; {REBUILD_HINT}, or set llm_backend='transformers'")
        t0 = time.perf_counter()
        path = packaged_gguf(self._spec.name) if self._spec is not None else self._gguf
        if self._fixed_threads is None:
            self.num_threads = default_threads()
        try:
            with Progress.of(self).loading(f"LLM {self.model_name} (llama.cpp, {self.num_threads} threads)"):
                self._llm = Llama(model_path=str(path), n_ctx=self.n_ctx, n_threads=self.num_threads,
                                  n_threads_batch=self.num_threads, seed=self.seed, verbose=False)
        except Exception as e:  # noqa: BLE001 - anything here means "cannot load the model"
            raise LLMError(f"cannot load {path} with llama.cpp: {e}") from e
        self.load_seconds = time.perf_counter() - t0
        logger.info("loaded %s with llama.cpp (%d threads, n_ctx %d) in %.1fs", self.model_name,
                    self.num_threads, self.n_ctx, self.load_seconds)

    # ------------------------------------------------------------------ generation
    def generation_params(self, *, max_new_tokens: int | None = None,
                          temperature: float | None = None) -> dict:
        params: dict[str, Any] = {
            "max_new_tokens": int(max_new_tokens or self.default_max_new_tokens),
            "temperature": float(self.default_temperature if temperature is None else temperature),
            "backend": "llama_cpp", "weights": self._weights()}
        if params["temperature"] > 0:
            params["seed"] = self.seed
        return params

    def _formatter(self):
        """The GGUF's own chat template as a llama-cpp formatter (built once per load)."""
        if self._chat_formatter is None:
            from llama_cpp import llama_chat_format
            llm = self._llm
            template = llm.metadata.get("tokenizer.chat_template")
            if not template:
                raise LLMError(f"{self.model_name!r} has no chat template in its GGUF metadata; "
                               f"use an instruction-tuned model")
            eos, bos = llm.token_eos(), llm.token_bos()
            self._chat_formatter = llama_chat_format.Jinja2ChatFormatter(
                template=template, eos_token=llm._model.token_get_text(eos) if eos != -1 else "",
                bos_token=llm._model.token_get_text(bos) if bos != -1 else "",
                stop_token_ids=[eos] if eos != -1 else None)
        return self._chat_formatter

    def _prompt(self, msgs: list[dict]) -> tuple[list[int], Any]:
        """The token ids of ``msgs`` under the GGUF's chat template, and the formatter's result
        (the model loaded; the caller holds the lock)."""
        fmt = self._formatter()(messages=msgs)
        return self._llm.tokenize(fmt.prompt.encode("utf-8"), add_bos=not fmt.added_special, special=True), fmt

    def prompt_tokens(self, messages: Sequence[Message], **_: Any) -> tuple[int, int] | None:
        """The prompt's token count under the chat template, and ``n_ctx`` (loads the model)."""
        msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
        with self._lock:
            self._ensure_loaded()
            return len(self._prompt(msgs)[0]), self.n_ctx

    def generate(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
                 temperature: float | None = None) -> LLMResponse:
        """Generate one reply with the GGUF's chat template (greedy when temperature is 0).

        ``finish_reason`` is ``"stop"`` at the end of turn and ``"length"`` when
        ``max_new_tokens`` (or the context window) was reached; a generation stopped by
        ``timeout`` raises :class:`LLMTimeoutError`. Token counts are exact.
        """
        params = self.generation_params(max_new_tokens=max_new_tokens, temperature=temperature)
        max_new, temp = params["max_new_tokens"], params["temperature"]
        msgs = [{"role": m["role"], "content": m["content"]} for m in messages]
        token = cancel.current()
        with cancel.holding(self._lock, f"generation with {self.model_name!r}"):
            self._ensure_loaded()
            llm = self._llm
            timed_out = False
            pieces = _pieces_of(llm)

            def past_deadline(ids, _logits) -> bool:
                nonlocal timed_out
                if pieces is not None:
                    pieces(ids, len(prompt))
                timed_out = time.perf_counter() > deadline
                return timed_out or (token is not None and token.is_set())

            try:
                from llama_cpp import StoppingCriteriaList
                prompt, fmt = self._prompt(msgs)
                if len(prompt) >= self.n_ctx:
                    raise LLMError(f"the prompt is {len(prompt):,} tokens, more than the {self.n_ctx:,}-token "
                                   f"context window of {self.model_name!r} (n_ctx): shorten the context (a mode's "
                                   f"token budgets, e.g. hi_bridge_tokens, or fewer passages) or use a model "
                                   f"with a longer window")
                stop = fmt.stop if isinstance(fmt.stop, list) else ([fmt.stop] if fmt.stop else [])
                t0 = time.perf_counter()
                deadline = t0 + self.timeout
                _forget_a_repeated_prompt(llm, prompt)
                out = llm.create_completion(
                    prompt=prompt, max_tokens=max_new, temperature=temp, top_k=0 if temp == 0 else 40,
                    top_p=1.0, min_p=0.0, repeat_penalty=1.0, seed=self.seed, stop=stop,
                    stopping_criteria=StoppingCriteriaList([past_deadline]))
            except LLMError:
                raise
            except Exception as e:  # noqa: BLE001 - e.g. a prompt longer than the context window
                raise LLMError(f"llama.cpp generation with {self.model_name!r} failed: {e}") from e
            elapsed = time.perf_counter() - t0
        choice, usage = out["choices"][0], out.get("usage") or {}
        n_prompt = int(usage.get("prompt_tokens", len(prompt)))
        n_new = int(usage.get("completion_tokens", 0))
        if token is not None and token.is_set():
            raise cancel.LLMCancelled(f"generation with {self.model_name!r} was stopped after {n_new} new tokens: "
                                      "its caller went away")
        if timed_out:
            raise LLMTimeoutError(f"local model {self.model_name!r} hit the {self.timeout:g}s "
                                  f"timeout after {n_new} of at most {max_new} new tokens")
        logger.debug("%s: %d prompt + %d new tokens in %.2fs", self.model_name, n_prompt, n_new, elapsed)
        text = choice.get("text") or ""
        if pieces is not None:
            pieces.finish(text)
        return LLMResponse(text=text, prompt_tokens=n_prompt, completion_tokens=n_new,
                           finish_reason="length" if choice.get("finish_reason") == "length" else "stop")


def _forget_a_repeated_prompt(llm: Any, prompt: list[int]) -> None:
    """Evaluate afresh a prompt the model's context already holds whole (the same prompt asked again): reusing
    it all but its last token gave another greedy reply than the first time. A prompt that only shares a
    prefix with the last call (the reader's instructions) keeps that prefix: re-evaluating it costs ~20x."""
    n = int(llm.n_tokens)
    if len(prompt) <= n and list(llm.input_ids[:len(prompt)]) == list(prompt):
        llm.reset()


class _TokenPieces(TextPieces):
    """The pieces of a llama.cpp reply: called with the context's token ids after each sampled
    token (as a stopping criterion, one token behind), it sends the text of the tokens it has not
    seen yet; :meth:`finish` sends the rest of the final text."""

    def __init__(self, llm, sink):
        super().__init__(sink)
        self._llm, self._seen = llm, 0

    def __call__(self, ids, n_prompt: int) -> None:
        new = [int(t) for t in ids[n_prompt + self._seen:]]
        if new:
            self._seen += len(new)
            self.feed(self._llm.detokenize(new))


def _pieces_of(llm) -> _TokenPieces | None:
    """The streaming of this call's reply when its caller asked for pieces (:mod:`.streaming`)."""
    sink = current_sink()
    return None if sink is None else _TokenPieces(llm, sink)


__all__ = ["LlamaCppClient", "default_threads", "llama_cpp_available", "resolve_gguf"]
