"""Fakes for unit tests only: a deterministic n-gram encoder and a scripted LLM."""
from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence

import numpy as np

from hippo_engine.llm.base import LLMClient, LLMResponse
from hippo_engine.models.encoder import Encoder


class NgramEncoder(Encoder):
    """Bag of hashed character trigrams, L2-normalised: similar strings get similar vectors."""

    def __init__(self, dim: int = 64, name: str = "fake-ngram"):
        self.dim, self.name = dim, name
        self.calls = 0

    def encode(self, texts: Sequence[str], *, instruction: str | None = None,
               show_progress: bool = False, desc: str = "") -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            t = f"  {(instruction or '') + t.lower()}  "
            for j in range(len(t) - 2):
                h = int.from_bytes(hashlib.md5(t[j:j + 3].encode()).digest()[:4], "little")
                out[i, h % self.dim] += 1.0
            n = np.linalg.norm(out[i])
            out[i] = out[i] / n if n else out[i]
        return out


class ScriptedLLM(LLMClient):
    """Answers with ``respond(messages) -> str``; may raise ``LLMError``. Counts calls."""

    def __init__(self, respond: Callable[[Sequence[dict]], str], name: str = "scripted"):
        self.respond, self.model_name = respond, name
        self.max_concurrency = 2
        self.calls = 0
        self._lock = threading.Lock()

    def generate(self, messages, *, max_new_tokens=None, temperature=None) -> LLMResponse:
        with self._lock:
            self.calls += 1
        text = self.respond(messages)
        return LLMResponse(text=text, prompt_tokens=10, completion_tokens=5)


class NoCallLLM(LLMClient):
    """Fails the test if any call is made."""

    model_name = "no-call"

    def generate(self, messages, *, max_new_tokens=None, temperature=None) -> LLMResponse:
        raise AssertionError("the LLM was called")
