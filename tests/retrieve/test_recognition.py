"""The recognition-memory filter: DSPy program on a fake LLMClient, parsing, mapping, save/load."""
import json
import socket
import threading

import dspy
import pytest

from hippo_engine.llm.base import LLMClient, LLMError, LLMResponse
from hippo_engine.retrieve.facts.recognition import (
    FactFilterProgram,
    LLMClientLM,
    RecognitionFilter,
    default_filter_program_path,
    filter_demo_split,
    format_facts,
    load_filter_program,
    match_to_candidates,
    parse_fact_list,
    read_filter_program_metadata,
    save_filter_program,
)

CANDS = [("ilse marrow", "born in", "dunhaven"),
         ("vellmar observatory", "founded by", "ilse marrow"),
         ("dunhaven", "has lighthouse", "grey needle"),
         ("mount caldis", "part of", "verrin range"),
         ("corvel university", "located in", "tessaly")]
QUESTION = "In which city was the founder of the Vellmar Observatory born?"
DEMO_Q = "Which river flows past the birthplace of the painter of Blue Dunes?"
DEMO_CANDS = [("blue dunes", "painted by", "ada kern"), ("ada kern", "born in", "olm"), ("olm", "on", "river tay")]
DEMO_OUT = DEMO_CANDS[:2]


def wrap(body: str) -> str:
    """A reply in DSPy's chat-adapter format."""
    return f"[[ ## relevant_facts ## ]]\n{body}\n\n[[ ## completed ## ]]"


class FakeLLM(LLMClient):
    """Scripted LLMClient: returns ``reply`` (or raises it when it is an exception)."""

    model_name = "fake/filter-model"

    def __init__(self, reply):
        self.reply = reply
        self.calls = []
        self._lock = threading.Lock()

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        with self._lock:
            self.calls.append({"messages": [dict(m) for m in messages], "max_new_tokens": max_new_tokens,
                               "temperature": temperature})
        if isinstance(self.reply, BaseException):
            raise self.reply
        return LLMResponse(self.reply, prompt_tokens=50, completion_tokens=9, cached=True)


@pytest.fixture()
def program_path(tmp_path):
    program = FactFilterProgram()
    program.predict.demos = [dspy.Example(question=DEMO_Q, candidate_facts=format_facts(DEMO_CANDS),
                                          relevant_facts=format_facts(DEMO_OUT))]
    return save_filter_program(program, tmp_path / "some" / "where" / "prog.json", {"note": "test"})


@pytest.fixture()
def no_network(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError(f"network access attempted: {a!r}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def run(reply, program_path, cands=CANDS, **kw):
    llm = FakeLLM(reply)
    kept, info = RecognitionFilter(llm, program_path, **kw).filter(QUESTION, cands)
    return llm, kept, info


def test_valid_subset_kept_in_candidate_order(program_path, no_network):
    body = json.dumps([list(CANDS[1]), list(CANDS[0])])
    llm, kept, info = run(wrap(body), program_path)
    assert kept == [CANDS[0], CANDS[1]]
    assert info["reason"] == "kept" and info["n_kept"] == 2 and info["llm_calls"] == 1
    assert info["prompt_tokens"] == 50 and info["cached"] is True


def test_adapter_sends_instruction_and_demos_to_our_client(program_path, no_network):
    llm, _, _ = run(wrap("[]"), program_path, max_new_tokens=321, temperature=0.0)
    assert len(llm.calls) == 1
    call = llm.calls[0]
    msgs = call["messages"]
    instructions = json.loads(program_path.read_text())["predict"]["signature"]["instructions"]
    assert msgs[0]["role"] == "system" and instructions in msgs[0]["content"]
    # the demo as a user/assistant pair, then the real question
    assert msgs[1]["role"] == "user" and DEMO_Q in msgs[1]["content"]
    assert msgs[2]["role"] == "assistant" and format_facts(DEMO_OUT) in msgs[2]["content"]
    assert msgs[-1]["role"] == "user" and QUESTION in msgs[-1]["content"]
    assert format_facts(CANDS) in msgs[-1]["content"]
    assert call["max_new_tokens"] == 321 and call["temperature"] == 0.0


def test_fact_not_among_candidates_is_dropped(program_path):
    body = json.dumps([["made up", "is", "fact"], list(CANDS[2])])
    _, kept, info = run(wrap(body), program_path)
    assert kept == [CANDS[2]]
    assert info["unmatched"] == [["made up", "is", "fact"]]
    _, kept, info = run(wrap('[["made up", "is", "fact"]]'), program_path)
    assert kept == [] and info["reason"] == "no_match"


def test_normalised_match(program_path):
    _, kept, _ = run(wrap('[["Ilse Marrow", "born in", "Dunhaven."]]'), program_path)
    assert kept == [CANDS[0]]


@pytest.mark.parametrize("reply", ["I think the first fact matters most.", wrap("the first one"), ""])
def test_prose_or_garbage_keeps_none(program_path, reply):
    _, kept, info = run(reply, program_path)
    assert kept == [] and info["reason"] == "parse_error" and info["error"]


def test_bare_json_without_field_markers_is_accepted(program_path):
    _, kept, info = run('```json\n[["corvel university", "located in", "tessaly"]]\n```', program_path)
    assert kept == [CANDS[4]] and info["reason"] == "kept"


def test_empty_list_keeps_none(program_path):
    _, kept, info = run(wrap("[]"), program_path)
    assert kept == [] and info["reason"] == "none_selected" and info["error"] is None


def test_llm_error_keeps_none(program_path):
    llm, kept, info = run(LLMError("server gone"), program_path)
    assert kept == [] and info["reason"] == "llm_error" and "server gone" in info["error"]
    assert len(llm.calls) == 1  # no retries by DSPy; the client retries itself


def test_no_candidates_no_call(program_path):
    llm, kept, info = run(AssertionError("must not be called"), program_path, cands=[])
    assert kept == [] and info["reason"] == "no_candidates" and llm.calls == []


def test_max_kept(program_path):
    body = json.dumps([list(c) for c in reversed(CANDS)])
    _, kept, info = run(wrap(body), program_path, max_kept=2)
    assert kept == CANDS[:2] and info["n_output_facts"] == 5
    with pytest.raises(ValueError):
        RecognitionFilter(FakeLLM("[]"), program_path, max_kept=0)


def test_parse_fact_list_shapes():
    assert parse_fact_list('[["a", "b", "c"]]') == ([("a", "b", "c")], 0)
    assert parse_fact_list('["a", "b", "c"]') == ([("a", "b", "c")], 0)  # a single bare triple
    assert parse_fact_list('{"fact": [["a", "b", "c"]]}') == ([("a", "b", "c")], 0)
    assert parse_fact_list('[{"subject": "a", "predicate": "b", "object": 1990}]') == ([("a", "b", "1990")], 0)
    assert parse_fact_list('Here: [["a", "b", "c"], ["too", "short"]] done') == ([("a", "b", "c")], 1)
    assert parse_fact_list("[]") == ([], 0)
    for bad in ["none of them", '"just a string"', '{"a": 1}', "__import__('os')"]:
        with pytest.raises(ValueError):
            parse_fact_list(bad)


def test_match_to_candidates_exact_before_normalised():
    cands = [("a", "b", "c"), ("A", "b", "c")]
    assert match_to_candidates([("A", "b", "c")], cands, 4) == ([("A", "b", "c")], [])
    assert match_to_candidates([("a.", "b", "c")], cands, 4) == ([("a", "b", "c")], [])


def test_program_round_trip_from_any_path(program_path, tmp_path):
    loaded = load_filter_program(program_path)
    assert len(loaded.predict.demos) == 1
    assert loaded.predict.demos[0]["question"] == DEMO_Q
    assert loaded.predict.signature.instructions == FactFilterProgram().predict.signature.instructions
    assert read_filter_program_metadata(program_path) == {"note": "test"}
    again = save_filter_program(loaded, tmp_path / "copy.json")
    a, b = json.loads(program_path.read_text()), json.loads(again.read_text())
    assert a["predict"] == b["predict"]


def test_load_refuses_pickle_and_foreign_json(tmp_path):
    with pytest.raises(ValueError):
        load_filter_program(tmp_path / "prog.pkl")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"predict": {"signature": {"instructions": "x", "fields": [{}]}}}))
    with pytest.raises(ValueError):
        load_filter_program(other)
    with pytest.raises(FileNotFoundError):
        load_filter_program(tmp_path / "missing.json")


def test_lm_adapter_is_a_dspy_lm():
    lm = LLMClientLM(FakeLLM("x"))
    assert isinstance(lm, dspy.BaseLM) and lm.cache is False and lm.num_retries == 0


def test_shipped_program_loads_with_data_built_demos():
    path = default_filter_program_path()
    program = load_filter_program(path)
    demos = program.predict.demos
    assert 8 <= len(demos) <= 12
    outputs = [json.loads(d["relevant_facts"]) for d in demos]
    assert any(o == [] for o in outputs) and any(o for o in outputs)
    for d, out in zip(demos, outputs, strict=False):
        cands = [tuple(c) for c in json.loads(d["candidate_facts"])]
        assert all(tuple(f) in cands for f in out) and len(out) <= 4
    split = filter_demo_split(path)
    assert len(split["evaluation_ids"]) == 80 and len(split["demo_pool_ids"]) == 20
    assert not set(split["evaluation_ids"]) & set(split["demo_pool_ids"])
    assert set(split["demo_ids"]) <= set(split["demo_pool_ids"])
    assert len(split["demo_ids"]) == len(demos)


class BatchLLM(FakeLLM):
    """Keeps the candidate named in the question ("keep N"); records every generate_many batch."""

    def __init__(self, fail_on=None):
        super().__init__(None)
        self.batches, self.fail_on = [], fail_on
        self.max_concurrency = 4

    def generate_many(self, batch, **kw):
        self.batches.append(len(batch))
        return super().generate_many(batch, **kw)

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        user = messages[-1]["content"]
        with self._lock:
            self.calls.append(user)
        if self.fail_on and self.fail_on in user:
            raise LLMError("boom")
        n = int(user.split("keep ")[1][0])
        return LLMResponse(wrap(json.dumps([list(CANDS[n])])), prompt_tokens=7, completion_tokens=3)


def test_filter_many_sends_one_batch_and_equals_single_calls(program_path):
    questions = [f"Which fact? keep {n}" for n in (0, 3, 1, 4)] + ["nothing to keep 0"]
    cands = [CANDS, CANDS, CANDS[:2], CANDS, []]
    llm = BatchLLM(fail_on="keep 1")
    flt = RecognitionFilter(llm, program_path)
    got = flt.filter_many(questions, cands)
    assert llm.batches == [4]                    # one batch; the question without candidates asks nothing
    assert [k for k, _ in got] == [[CANDS[0]], [CANDS[3]], [], [CANDS[4]], []]
    assert [i["reason"] for _, i in got] == ["kept", "kept", "llm_error", "kept", "no_candidates"]
    assert got[0][1]["llm_calls"] == 1 and got[0][1]["prompt_tokens"] == 7
    # each result is what a lone filter() call gives, and the prompts are the same
    solo = BatchLLM(fail_on="keep 1")
    lone = RecognitionFilter(solo, program_path)
    assert [lone.filter(q, c) for q, c in zip(questions, cands, strict=True)] == got
    assert sorted(solo.calls) == sorted(llm.calls) and len(llm.calls) == 4
    with pytest.raises(ValueError):
        flt.filter_many(["a"], [])


def test_unreadable_reply_is_discarded_from_the_cache_and_recorded_as_a_query_error(program_path, tmp_path):
    from hippo_engine.llm.cache import CachedLLM
    from hippo_engine.retrieve.facts.recognition import recording_filter
    inner = FakeLLM("I think the first fact matters most, but who knows." + " really" * 30)
    cache = CachedLLM(inner, tmp_path / "cache.sqlite")
    failed: dict = {}
    flt = recording_filter(RecognitionFilter(cache, program_path), failed)
    assert flt([QUESTION, "no candidates"], [CANDS, []]) == [[], []]
    (err,) = failed[QUESTION]
    assert err.startswith("recognition filter: unparseable reply: 'I think the first fact") and len(err) < 160
    assert list(failed) == [QUESTION] and len(cache) == 0     # not kept as an answer
    inner.reply = wrap(json.dumps([list(CANDS[2])]))
    failed.clear()
    assert flt([QUESTION], [CANDS]) == [[CANDS[2]]] and failed == {}   # asked again, not read back
    assert len(inner.calls) == 2
    assert flt([QUESTION], [CANDS]) == [[CANDS[2]]] and len(inner.calls) == 2   # a good reply stays cached
    inner.reply = wrap("[]")
    assert flt(["other question"], [CANDS]) == [[]] and failed == {}   # an empty list is an answer
