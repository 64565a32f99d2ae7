"""Fitting the reader's context into the model's window (hippo_engine/qa/fit.py): a fake client
that counts words here; the real llama.cpp reader in tests/llm/test_llamacpp.py."""
import threading

from hippo_engine.datatypes import QuerySolution
from hippo_engine.llm.base import LLMClient, LLMResponse
from hippo_engine.qa.fit import REPLY_ROOM, fit_parts
from hippo_engine.qa.reader import answer_questions, build_reader_messages, default_reader_template


class WindowLLM(LLMClient):
    """Counts a prompt as its words; a prompt over ``window`` fails as llama.cpp's does."""

    model_name = "window-fake"

    def __init__(self, window: int | None):
        self.window, self.seen, self._lock = window, [], threading.Lock()

    def prompt_tokens(self, messages, **_):
        if self.window is None:
            return None
        return sum(len(m["content"].split()) for m in messages), self.window

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        with self._lock:
            self.seen.append(messages)
        n = sum(len(m["content"].split()) for m in messages)
        assert self.window is None or n <= self.window - min(REPLY_ROOM, max_new_tokens or REPLY_ROOM)
        return LLMResponse("Thought.\nAnswer: Cetra [1]", prompt_tokens=n, completion_tokens=4)


def _words(n: int, tag: str) -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def test_a_prompt_that_fits_is_untouched_and_a_long_one_keeps_its_longest_fitting_prefix():
    llm = WindowLLM(1000)
    build = lambda ps: [{"role": "user", "content": "\n".join(ps) + "\nQuestion: q"}]   # noqa: E731
    parts = [_words(100, f"l{i}x") for i in range(4)]
    assert fit_parts(llm, parts, build) == (0, build(parts))                  # 402 words
    parts = [_words(100, f"l{i}x") for i in range(12)]                         # 1,202 words: 4 lines fit in 488
    cut, msgs = fit_parts(llm, parts, build)
    assert cut == 8 and msgs == build(parts[:4])
    assert fit_parts(llm, parts, build, reply_tokens=50)[0] == 3              # 950 words of room: 9 lines
    assert fit_parts(llm, [_words(2000, "x")], build) == (1, build([]))       # not one part fits
    assert fit_parts(WindowLLM(None), parts, build) == (0, build(parts))      # the client cannot count


def test_answer_questions_cuts_passages_and_contexts_and_says_so():
    from hippo_engine.ids import chunk_id
    docs = [f"Doc{i}\n" + _words(300, f"d{i}w") for i in range(5)]
    template = default_reader_template()
    base = WindowLLM(10**6).prompt_tokens(build_reader_messages("Which town?", [], template))[0]
    with_two = WindowLLM(10**6).prompt_tokens(build_reader_messages("Which town?", docs[:2], template))[0]
    llm = WindowLLM(with_two + REPLY_ROOM + 100)                               # two passages fit, not three
    assert with_two - base > 600
    sols = [QuerySolution("Which town?", docs, [1.0] * 5), QuerySolution("Short?", docs[:1], [1.0])]
    _, meta = answer_questions(llm, sols, qa_top_k=5)
    assert [m["context_cut"] for m in meta] == [3, 0] and not any(m["error"] for m in meta)
    first_user = llm.seen[0][-1]["content"]
    assert "Doc1" in first_user and "Doc2" not in first_user
    assert sols[0].citations == [chunk_id(docs[0])] and sols[0].answer == "Cetra"

    context = "\n".join(_words(50, f"c{i}w") for i in range(40))             # 2,000 words of sections
    llm.seen.clear()
    _, meta = answer_questions(llm, [QuerySolution("Which town?", [], [])], contexts=[context])
    shown = llm.seen[0][-1]["content"]
    assert meta[0]["context_cut"] > 0 and "c0w0" in shown and "c39w0" not in shown
    assert shown.startswith("c0w0") and shown.endswith("Question: Which town?\nThought: ")


def test_the_cut_keeps_the_instructions_and_examples():
    template = default_reader_template()
    llm = WindowLLM(1500)
    build = lambda ps: build_reader_messages("Which town?", list(ps), template)   # noqa: E731
    cut, msgs = fit_parts(llm, [_words(400, f"p{i}w") for i in range(6)], build)
    assert cut > 0 and msgs[0] == build([])[0] and msgs[-1]["content"].endswith("Question: Which town?\nThought: ")


def test_a_cached_request_needs_no_count(tmp_path):
    """Behind the LLM cache, a request it holds is not counted (a local model need not load for it)."""
    from hippo_engine.llm.cache import CachedLLM

    class Counting(WindowLLM):
        counted = 0

        def prompt_tokens(self, messages, **kw):
            self.counted += 1
            return super().prompt_tokens(messages, **kw)

    inner = Counting(10_000)
    llm = CachedLLM(inner, tmp_path / "cache.sqlite")
    asked = [{"role": "user", "content": "Where is Velor?"}]
    llm.generate(asked, max_new_tokens=64)
    assert llm.prompt_tokens(asked, max_new_tokens=64) is None and inner.counted == 0
    assert llm.prompt_tokens(asked, max_new_tokens=32) == (3, 10_000) and inner.counted == 1
    llm.close()


def test_a_prefix_the_cache_holds_counts_as_fitting():
    """A rerun behind the cache: the whole prompt is counted (too long), the prefix an earlier run
    sent is cached (None): the search takes it, as the earlier run did."""
    class HalfCached(WindowLLM):
        def prompt_tokens(self, messages, **kw):
            content = messages[-1]["content"]
            return None if content.count("\n") == 4 else super().prompt_tokens(messages, **kw)

    build = lambda ps: [{"role": "user", "content": "\n".join(ps) + "\nQuestion: q"}]   # noqa: E731
    parts = [_words(100, f"l{i}x") for i in range(12)]
    assert fit_parts(HalfCached(1000), parts, build)[0] == 8                  # 4 lines, as without the cache


def test_a_client_that_cannot_count_leaves_the_prompt_whole_and_the_call_reports():
    from hippo_engine.llm.base import LLMError

    class Broken(WindowLLM):
        def prompt_tokens(self, messages, **kw):
            raise LLMError("model file missing")

        def generate(self, messages, *, max_new_tokens=None, temperature=None):
            raise LLMError("model file missing")

    sols = [QuerySolution("Which town?", ["Doc\nText."], [1.0])]
    _, meta = answer_questions(Broken(100), sols)
    assert meta[0]["context_cut"] == 0 and "model file missing" in meta[0]["error"]
