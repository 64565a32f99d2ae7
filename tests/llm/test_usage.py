"""The one usage meter: counters and the metering middleware."""
import threading

import pytest

from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse
from hippo_engine.llm.usage import MeteredLLM, Usage, delta


class Replies(LLMClient):
    model_name = "toy"
    max_concurrency = 4

    def __init__(self):
        self.n = 0

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        self.n += 1
        if messages[-1]["content"] == "fail":
            raise LLMError("scripted failure")
        return LLMResponse(text="ok", prompt_tokens=7, completion_tokens=2,
                           cached=messages[-1]["content"] == "cached")


def test_usage_counts_new_cached_and_failed_replies():
    u = Usage()
    u.add(LLMResponse("a", 10, 3))
    u.add(LLMResponse("b", 5, 1, cached=True))
    u.add(LLMError("x"))
    assert u.snapshot() == {"calls": 2, "cache_hits": 1, "errors": 1, "prompt_tokens": 10, "completion_tokens": 3,
                            "cached_prompt_tokens": 5, "cached_completion_tokens": 1}
    assert u.spent_tokens == 13


def test_usage_is_thread_safe():
    u = Usage()

    def work():
        for _ in range(2000):
            u.add(LLMResponse("a", 1, 1))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert u.snapshot()["calls"] == 8000 and u.spent_tokens == 16000


def test_metered_llm_records_every_reply_and_loads_lazily():
    made = []

    def factory():
        made.append(Replies())
        return made[-1]

    m = MeteredLLM(factory, "toy")
    assert not m.loaded and made == []
    before = m.usage.snapshot()
    m.generate([{"role": "user", "content": "hi"}])
    with pytest.raises(LLMError):
        m.generate([{"role": "user", "content": "fail"}])
    out = m.generate_many([[{"role": "user", "content": c}] for c in ("a", "cached", "fail")])
    assert isinstance(out[2], LLMError)
    d = delta(m.usage.snapshot(), before)
    assert d["calls"] == 3 and d["cache_hits"] == 1 and d["errors"] == 2
    assert d["prompt_tokens"] == 14 and d["cached_prompt_tokens"] == 7
    assert len(made) == 1 and made[0].n == 5


def test_metered_llm_discard_delegates_and_is_a_noop_before_loading():
    seen = []

    class Recorder(Replies):
        def discard(self, response):
            seen.append(response)

    lazy = MeteredLLM(Recorder, model_name="toy")
    lazy.discard(LLMResponse(text="x"))
    assert not lazy.loaded and seen == []
    r = lazy.generate([{"role": "user", "content": "hi"}])
    lazy.discard(r)
    assert seen == [r]
