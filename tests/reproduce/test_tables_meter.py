"""LLM accounting (reproduce/tables/meter.py)."""
from toy_tables import CountingLLM

from reproduce.tables.meter import MeteredLLM


def test_metered_llm_counts_cache_hits_and_loads_lazily():
    made = []

    def factory():
        made.append(1)
        return CountingLLM()

    m = MeteredLLM(factory, "toy")
    assert not m.loaded and not made
    msgs = [{"role": "user", "content": "Passage:\nIlse Marrow"}]
    m.generate(msgs)
    m.generate_many([msgs, msgs])
    c = m.snapshot()
    assert made == [1] and c["calls"] == 3 and c["cache_hits"] == 2
    assert c["prompt_tokens"] == 10 and c["cached_prompt_tokens"] == 20
