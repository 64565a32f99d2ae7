"""A local ``transformers`` causal LM on CPU, including the packaged GGUF models.

Packaged GGUF models (see :mod:`hippo_engine.models.assets`) are de-quantised by
``transformers`` once (slow: about a minute on 2 cores), saved as bfloat16 safetensors together
with the tokenizer and chat template in the model cache, and loaded from there afterwards
(seconds). The conversion is written to a temporary directory and renamed into place.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hippo_engine.llm import cancel
from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse, LLMTimeoutError, Message
from hippo_engine.llm.streaming import TextPieces, current_sink
from hippo_engine.models.assets import (
    DEFAULT_LLM,
    PACKAGED_LLMS,
    PackagedLLM,
    converted_llm_dir,
    exclusive_lock,
    find_packaged_llm,
    packaged_gguf,
)
from hippo_engine.progress import Progress
from hippo_engine.system import usable_cpus

logger = logging.getLogger(__name__)

_CONVERSION_MARKER = "hippo_conversion.json"
# End-of-turn tokens of common chat templates; only those the vocabulary knows are used.
_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<end_of_turn>")


def _torch():
    import torch
    return torch


def _load_gguf(path: Path, dtype: Any):
    """Load tokenizer and a fully de-quantised model from a GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    kwargs: dict = {}
    try:  # newer transformers keep GGUF weights packed unless asked to de-quantise
        from transformers import GgufConfig
        kwargs["quantization_config"] = GgufConfig(dequantize=True)
    except ImportError:  # pragma: no cover - older transformers always de-quantise
        pass
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype,
                                                 local_files_only=True, **kwargs)
    return tok, model


def _conversion_ok(d: Path, spec: PackagedLLM) -> bool:
    try:
        info = json.loads((d / _CONVERSION_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return info.get("source_sha256") == spec.sha256 and (d / "config.json").is_file()


def convert_packaged_model(name: str | None = None) -> Path:
    """Directory holding the bfloat16 safetensors conversion of a packaged GGUF model.

    Converts on the first call (joins the GGUF via :func:`packaged_gguf`, de-quantises it with
    ``transformers``, ``save_pretrained`` of model and tokenizer into a temporary directory,
    then renames it into place); later calls return the existing directory at once.
    """
    spec = find_packaged_llm(name)
    if spec is None:
        raise LLMError(f"{name!r} is not a packaged model")
    dest = converted_llm_dir(spec.name)
    if _conversion_ok(dest, spec):
        return dest
    gguf = packaged_gguf(spec.name)  # before the lock: it takes its own
    dest.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(dest.with_name(dest.name + ".lock")):
        if _conversion_ok(dest, spec):
            return dest
        torch = _torch()
        t0 = time.perf_counter()
        logger.info("converting %s (%s) to bfloat16 safetensors, once; this takes a minute",
                    spec.name, gguf.name)
        tok, model = _load_gguf(gguf, torch.bfloat16)
        config = model.config
        if hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")
        # A GGUF-loaded model refuses save_pretrained (its quantizer is "not serializable", even
        # de-quantised), so move the dense tensors into a plain model built on the meta device.
        from transformers import AutoModelForCausalLM
        with torch.device("meta"):
            plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        plain.load_state_dict(model.state_dict(), strict=True, assign=True)
        if getattr(config, "tie_word_embeddings", False):
            plain.tie_weights()
        if model.generation_config is not None:
            plain.generation_config = model.generation_config
        del model
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
        try:
            plain.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            import transformers
            (tmp / _CONVERSION_MARKER).write_text(json.dumps({
                "source": gguf.name, "source_sha256": spec.sha256, "dtype": "bfloat16",
                "transformers_version": transformers.__version__, "converted_at": time.time(),
            }, indent=1), encoding="utf-8")
            os.chmod(tmp, 0o755)
            for f in tmp.iterdir():
                os.chmod(f, 0o644)
            if dest.exists():  # an unfinished / outdated conversion
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        logger.info("converted %s in %.1fs -> %s", spec.name, time.perf_counter() - t0, dest)
    return dest


def hub_cache_snapshot(name: str) -> Path | None:
    """The local Hugging Face cache's snapshot directory of hub model ``name`` (one holding its
    ``config.json``), or None. Never uses the network."""
    try:
        from huggingface_hub import try_to_load_from_cache
        found = try_to_load_from_cache(name, "config.json")
    except Exception:  # noqa: BLE001 - not a valid repo id, unreadable cache: not found
        return None
    return Path(found).parent if isinstance(found, str) else None


def resolve_local_model(model: str | os.PathLike) -> str:
    """Where a local model that is not packaged loads from: an existing path as given, or a hub
    name's directory in the local Hugging Face cache. Anything else raises ``LLMError`` at once,
    naming the model and the packaged models (nothing is downloaded: a mistyped name must not
    send the hub client into its retry loop)."""
    if Path(model).exists():
        return str(model)
    snapshot = hub_cache_snapshot(str(model))
    if snapshot is not None:
        return str(snapshot)
    try:
        from huggingface_hub import constants
        where = f" ({constants.HF_HUB_CACHE})"
    except ImportError:  # pragma: no cover - transformers depends on it
        where = ""
    raise LLMError(
        f"unknown local model {str(model)!r}: not a packaged model ({', '.join(PACKAGED_LLMS)}), not an "
        f"existing file or directory, and not in the local Hugging Face cache{where}. Check the spelling; "
        "nothing is downloaded, so fetch a hub model first (huggingface-cli download NAME), pass its "
        "directory, or serve it and use an OpenAI-compatible URL (--llm-base-url)")


@contextlib.contextmanager
def _torch_threads(n: int):
    """Run with ``n`` torch intra-op threads, then restore the previous setting."""
    torch = _torch()
    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if before != n:
            torch.set_num_threads(before)


class LocalHFClient(LLMClient):
    """A ``transformers`` causal LM run in-process on CPU.

    Args:
        model: a packaged model name or alias (``None``: :data:`DEFAULT_LLM`), a local model
            directory, a path to a ``.gguf`` file, or the name of a hub model already in the
            local Hugging Face cache (nothing is downloaded; any other name raises
            :class:`LLMError` here, listing the packaged models).
        temperature: default temperature; ``0`` means greedy decoding.
        max_new_tokens: default cap on generated tokens.
        timeout: seconds one generation may run (``max_time`` stopping criterion); a reply cut
            off by it raises :class:`LLMTimeoutError`. Model loading is not counted.
        num_threads: torch intra-op threads while generating (``None``: env
            ``HIPPO_ENGINE_LLM_THREADS``, else half the CPUs this process may use, at least 1 and
            at most 8: decoding is memory-bound, and on a busy machine oversubscribed OpenMP
            threads run several times slower). Set around each generation and restored after,
            since ``torch.set_num_threads`` is process-wide.
        dtype: compute dtype (``"float32"`` default: CPUs without native bfloat16 run it ~2x
            faster; ``"bfloat16"`` halves memory).

    The model is loaded on the first ``generate`` (or by :meth:`load`), so a client whose calls
    are all answered by a cache never loads it. One generation runs at a time (a lock);
    ``max_concurrency`` is 1.
    """

    max_concurrency = 1
    #: the reader's token cap with this client (``hippo_engine.qa.reader.reply_tokens``): room for a
    #: few short sentences of reasoning and the answer line; a small model that rambles stops here
    reader_reply_tokens = 256

    def __init__(self, model: str | os.PathLike | None = None, *, temperature: float = 0.0,
                 max_new_tokens: int = 2048, timeout: float = 120.0,
                 num_threads: int | None = None, dtype: str = "float32"):
        self._spec: PackagedLLM | None = None
        self._gguf_file: Path | None = None
        self._source: str = ""
        if model is None or (not Path(model).exists() and find_packaged_llm(str(model))):
            spec = find_packaged_llm(None if model is None else str(model))
            if spec is None:   # pragma: no cover - the condition above found it
                raise LLMError(f"no packaged model {model!r}")
            self._spec = spec
            self.model_name = spec.name
        else:
            p = Path(model)
            if p.is_file() and p.suffix == ".gguf":
                self._gguf_file = p
            self._source = resolve_local_model(model)   # fails fast on an unknown name
            self.model_name = str(model)
        if dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
        if timeout is None or timeout <= 0:
            raise ValueError("timeout must be > 0 seconds")
        self.default_temperature = float(temperature)
        self.default_max_new_tokens = int(max_new_tokens)
        self.timeout = float(timeout)
        self.dtype = dtype
        env_threads = os.environ.get("HIPPO_ENGINE_LLM_THREADS")
        self.num_threads = int(num_threads or env_threads or max(1, min(8, usable_cpus() // 2)))
        self._lock = threading.Lock()
        self._model: Any = None       # the transformers model, loaded on first use
        self._tokenizer: Any = None
        self._eos_ids: list[int] = []
        self._pad_id: int | None = None
        self._load_error: LLMError | None = None
        self.load_seconds: float | None = None

    def __repr__(self) -> str:
        return f"LocalHFClient(model={self.model_name!r}, dtype={self.dtype!r})"

    # ------------------------------------------------------------------ loading
    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory."""
        return self._model is not None

    def load(self) -> LocalHFClient:
        """Load tokenizer and weights now (converting a packaged GGUF on first use)."""
        with self._lock:
            self._ensure_loaded()
        return self

    def _ensure_loaded(self) -> None:
        """Load once; a failed load is one attempt: later calls raise the same error at once."""
        if self._model is not None:
            return
        if self._load_error is not None:
            raise self._load_error
        try:
            with Progress.of(self).loading(f"LLM {self.model_name} (transformers)"):
                self._load()
        except LLMError as e:
            self._load_error = e
            raise

    def _load(self) -> None:
        torch = _torch()
        dtype = getattr(torch, self.dtype)
        t0 = time.perf_counter()
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
            if self._spec is not None:
                src = convert_packaged_model(self._spec.name)
                tok = AutoTokenizer.from_pretrained(src, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype, local_files_only=True)
            elif self._gguf_file is not None:
                tok, model = _load_gguf(self._gguf_file, dtype)
            else:   # a local directory (maybe in the hub cache): never the network
                tok = AutoTokenizer.from_pretrained(self._source, local_files_only=True)
                model = AutoModelForCausalLM.from_pretrained(self._source, dtype=dtype, local_files_only=True)
        except LLMError:
            raise
        except Exception as e:  # noqa: BLE001 - anything here means "cannot load the model"
            raise LLMError(f"cannot load local model {self.model_name!r}: {e}") from e
        if not getattr(tok, "chat_template", None):
            raise LLMError(f"the tokenizer of {self.model_name!r} has no chat template; "
                           f"use an instruction-tuned model")
        model.train(False)  # inference behaviour (no dropout); from_pretrained does it too
        eos: list[int] = []
        gen_eos = getattr(model.generation_config, "eos_token_id", None)
        for t in ([gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])):
            eos.append(int(t))
        if tok.eos_token_id is not None:
            eos.append(int(tok.eos_token_id))
        vocab = tok.get_vocab()
        eos.extend(vocab[t] for t in _END_TOKENS if t in vocab)
        self._eos_ids = list(dict.fromkeys(eos))
        if not self._eos_ids:
            raise LLMError(f"cannot tell the end-of-turn token of {self.model_name!r}")
        self._pad_id = tok.pad_token_id if tok.pad_token_id is not None else self._eos_ids[0]
        self._tokenizer, self._model = tok, model
        self.load_seconds = time.perf_counter() - t0
        logger.info("loaded %s (%s, %d threads) in %.1fs", self.model_name, self.dtype,
                    self.num_threads, self.load_seconds)

    # ------------------------------------------------------------------ generation
    def generation_params(self, *, max_new_tokens: int | None = None,
                          temperature: float | None = None) -> dict:
        """Effective parameters of a call (defaults filled in, plus backend and dtype)."""
        return {"max_new_tokens": int(max_new_tokens or self.default_max_new_tokens),
                "temperature": float(self.default_temperature if temperature is None else temperature),
                "backend": "transformers", "dtype": self.dtype}

    def generate(self, messages: Sequence[Message], *, max_new_tokens: int | None = None,
                 temperature: float | None = None) -> LLMResponse:
        """Generate one reply with the model's chat template (greedy when temperature is 0).

        ``finish_reason`` is ``"stop"`` at an end-of-turn token and ``"length"`` when
        ``max_new_tokens`` was reached; a generation stopped by ``timeout`` raises
        :class:`LLMTimeoutError`.
        """
        params = self.generation_params(max_new_tokens=max_new_tokens, temperature=temperature)
        max_new, temp = params["max_new_tokens"], params["temperature"]
        msgs = [dict(m) for m in messages]
        token = cancel.current()
        with cancel.holding(self._lock, f"local generation with {self.model_name!r}"):
            self._ensure_loaded()
            torch = _torch()
            tok, model = self._tokenizer, self._model
            try:
                enc = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt",
                                              return_dict=True)
                gen_kwargs: dict = dict(max_new_tokens=max_new, max_time=self.timeout,
                                        eos_token_id=self._eos_ids, pad_token_id=self._pad_id)
                if temp > 0:
                    gen_kwargs.update(do_sample=True, temperature=temp)
                else:
                    gen_kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
                sink = current_sink()
                if sink is not None:
                    gen_kwargs["streamer"] = _Streamer(tok, sink)
                if token is not None:
                    gen_kwargs["stopping_criteria"] = _cancel_criteria(token)
                t0 = time.perf_counter()
                with _torch_threads(self.num_threads), torch.inference_mode():
                    out = model.generate(**enc, **gen_kwargs)
                elapsed = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001 - surface as LLMError, never crash a batch
                raise LLMError(f"local generation with {self.model_name!r} failed: {e}") from e
        n_prompt = int(enc["input_ids"].shape[1])
        new = out[0, n_prompt:].tolist()
        if token is not None and token.is_set():
            raise cancel.LLMCancelled(f"local generation with {self.model_name!r} was stopped after {len(new)} new "
                                      "tokens: its caller went away")
        hit_eos = bool(new) and new[-1] in self._eos_ids
        if hit_eos:
            finish = "stop"
        elif len(new) >= max_new:
            finish = "length"
        else:
            raise LLMTimeoutError(f"local model {self.model_name!r} hit the {self.timeout:g}s "
                                  f"timeout after {len(new)} of at most {max_new} new tokens")
        text_ids = new[:-1] if hit_eos else new
        text = tok.decode(text_ids, skip_special_tokens=True)
        logger.debug("%s: %d prompt + %d new tokens in %.2fs (%.1f tok/s)", self.model_name,
                     n_prompt, len(new), elapsed, len(new) / elapsed if elapsed > 0 else 0.0)
        if sink is not None:
            gen_kwargs["streamer"].finish(text)
        return LLMResponse(text=text, prompt_tokens=n_prompt, completion_tokens=len(new),
                           finish_reason=finish)


def _cancel_criteria(token):
    """A ``transformers`` stopping criterion that ends the generation once ``token`` (:mod:`.cancel`) is set."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class _Cancelled(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            torch = _torch()
            return torch.full((input_ids.shape[0],), token.is_set(), dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([_Cancelled()])


class _Streamer(TextPieces):
    """A ``transformers`` streamer (``put`` / ``end``) that sends the pieces of a reply to a sink
    (:mod:`.streaming`): the first ``put`` is the prompt, then the new tokens; the text is the
    decoded new tokens, sent when it no longer ends in half a character."""

    def __init__(self, tokenizer, sink):
        super().__init__(sink)
        self._tok, self._ids, self._prompt_seen = tokenizer, [], False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        self._ids.extend(value.reshape(-1).tolist())
        so_far = self._tok.decode(self._ids, skip_special_tokens=True)
        if not so_far.endswith("\ufffd"):
            self.text(so_far)

    def end(self) -> None:
        return None


__all__ = ["LocalHFClient", "convert_packaged_model", "DEFAULT_LLM"]
