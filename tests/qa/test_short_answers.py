"""The reader answers briefly or not at all, never with a cut fragment (issue 39, item 4): the stop
rule (the local readers' token cap, a reply the cap stopped inside its answer), the cut at whole units
only, and the measurement's fragment check (fake LLMs; the real packaged reader is in
test_short_answers_real.py)."""
from hippo_engine.llm.base import LLMClient, LLMResponse
from hippo_engine.llm.cache import CachedLLM
from hippo_engine.qa.grounding import cut_answer
from hippo_engine.qa.reader import QuerySolution, answer_questions, reply_tokens
from reproduce.reader_choice_data import fragment

DOCS = ["mosh\nmobile shell that supports roaming and intelligent local echo\n Mosh is a replacement for\n"
        " interactive SSH terminals. It allows roaming, supports intermittent\n connectivity.",
        "tmate\nterminal multiplexer with instant terminal sharing\n tmate provides an instant pairing solution,\n"
        " allowing you to share a terminal with one or several teammates."]
QUESTION = "Which package provides a mobile shell that survives roaming?"


class Reply(LLMClient):
    """A reader that writes ``text`` and ends with ``finish``; records the token cap it was given."""

    model_name = "fake-reader"

    def __init__(self, text, finish="stop", reader_reply_tokens=None):
        self.text, self.finish, self.asked = text, finish, []
        if reader_reply_tokens is not None:
            self.reader_reply_tokens = reader_reply_tokens

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        self.asked.append(max_new_tokens)
        return LLMResponse(self.text, prompt_tokens=1, completion_tokens=1, finish_reason=self.finish)


def read(text, finish="stop", **kw):
    sol = QuerySolution(QUESTION, list(DOCS), [1.0, 0.5])
    answer_questions(Reply(text, finish), [sol], 5, **kw)
    return sol


def test_a_long_answer_with_no_short_whole_unit_is_empty_with_a_note_not_a_fragment():
    # the case: no Answer line, a reasoning sentence about the wrong passage, 20+ words
    sol = read("The passage on tmate says it provides an instant pairing solution, allowing you to share a "
               "terminal with one or several teammates over the internet")
    assert sol.answer == "" and sol.answer_notes[0].startswith("rejected:") and "fragment" in sol.answer_notes[0]
    text, note = cut_answer(" ".join(["word"] * 40))
    assert text == "" and note is not None and note.startswith("rejected: an answer of 40 words")
    assert cut_answer("mosh is the one that survives roaming because it keeps the session alive over UDP "
                      "while the client moves")[0] == ""


def test_over_long_answers_are_cut_at_whole_units_only():
    assert read("Answer: mosh [1]").answer == "mosh"
    assert read("Answer: mosh. [1]").answer == "mosh" and read("mosh [1].").answer == "mosh"
    assert read("Answer: Washington, D.C. [1]").answer == "Washington, D.C."
    sol = read("Mosh keeps the session.\nAnswer: mosh, which replaces interactive SSH terminals and supports "
               "intermittent connectivity for people who travel [1]")
    assert sol.answer == "mosh" and sol.answer_notes[0].startswith("cut:")
    assert cut_answer("The mosh package. It is a replacement for interactive SSH terminals that allows "
                      "roaming")[0] == "The mosh package"
    assert cut_answer("mosh\nMosh is a replacement for interactive SSH terminals. It allows roaming and more",
                      marked=False)[0] == "mosh"     # a pasted passage: its title line
    sol = read("fakeroot.\nfakeroot command.\nfakeroot daemon.\nbase-passwd.")   # a short list of lines
    assert sol.answer == "fakeroot" and sol.answer_notes[0].startswith("cut:")


def test_a_reply_the_token_cap_stopped_inside_its_answer_gives_no_answer():
    sol = read("The passage on valgrind [1] says so.\nAnswer: libtsan2-ppc64el-cr", finish="length")
    assert sol.answer == "" and "token cap" in sol.answer_notes[0]
    sol = read("The passage on mosh [1] says it allows roaming and intermittent connectivity, and", finish="length")
    assert sol.answer == "" and "token cap" in sol.answer_notes[0]
    # the answer line ended before the cap: kept
    assert read("Reasoning.\nAnswer: mosh [1]\nMore text that the cap", finish="length").answer == "mosh"


def test_local_readers_are_capped_to_a_short_reply_and_others_are_not(tmp_path):
    local = Reply("Answer: mosh [1]", reader_reply_tokens=200)
    answer_questions(local, [QuerySolution(QUESTION, list(DOCS), [1.0, 0.5])], 5, max_new_tokens=2048)
    assert local.asked == [200]
    assert reply_tokens(local, 64) == 64 and reply_tokens(local, None) == 200
    cached = CachedLLM(Reply("Answer: mosh", reader_reply_tokens=150), tmp_path / "c.sqlite")
    assert reply_tokens(cached, 2048) == 150
    remote = Reply("Answer: mosh")
    answer_questions(remote, [QuerySolution(QUESTION, list(DOCS), [1.0, 0.5])], 5, max_new_tokens=2048)
    assert remote.asked == [2048]


def test_the_packaged_local_clients_carry_a_reader_cap():
    from hippo_engine.llm.llamacpp import LlamaCppClient
    from hippo_engine.llm.local import LocalHFClient
    for cls in (LlamaCppClient, LocalHFClient):
        assert 64 <= cls.reader_reply_tokens <= 512


def test_the_measurement_tells_fragments_from_whole_answers():
    assert fragment("The passage on tmate says it provides an instant pairing solution",
                    "The passage on tmate says it provides an instant pairing solution, allowing you to", "stop")
    assert fragment("libtsan2-ppc64el-cr", "Reasoning.\nAnswer: libtsan2-ppc64el-cr", "length")
    assert fragment("mosh is the", "Answer: mosh is the package that survives roaming", "stop")
    assert not fragment("mosh", "The passage [1] says so.\nAnswer: mosh [1]", "stop")
    assert not fragment("mosh", "Answer: **mosh** [1]\n", "length")
    assert not fragment("The mosh package", "Answer: The mosh package. It allows roaming", "stop")
    assert not fragment("mosh", "Answer: mosh, which replaces SSH terminals", "stop")    # a name, then a clause
    assert not fragment("", "anything", "length")


class TwoTurns(LLMClient):
    """A reader that forgets its Answer line, then writes it when asked; records each call."""

    model_name = "fake-reader"

    def __init__(self, first, second):
        self.replies, self.calls = [first, second], []

    def generate(self, messages, *, max_new_tokens=None, temperature=None):
        self.calls.append((list(messages), max_new_tokens))
        return LLMResponse(self.replies[min(len(self.calls), 2) - 1], prompt_tokens=1, completion_tokens=1)


def test_a_reply_without_an_answer_line_gets_one_follow_up_turn_for_it():
    first = ("The passage on mosh says it is a replacement for interactive SSH terminals and that it allows "
             "roaming and supports intermittent connectivity")
    llm = TwoTurns(first, "Answer: mosh [1]")
    sol = QuerySolution(QUESTION, list(DOCS), [1.0, 0.5])
    responses, meta = answer_questions(llm, [sol], 5, max_new_tokens=2048)
    assert sol.answer == "mosh" and sol.answer_notes == [] and responses[0] == first + "\nAnswer: mosh [1]"
    asked, cap = llm.calls[1]
    assert cap == 32 and asked[-2] == {"role": "assistant", "content": first}
    assert asked[-1]["role"] == "user" and "Answer:" in asked[-1]["content"] and meta[0]["completion_tokens"] == 2
    # a reply with its Answer line, or with a short answer of its own, gets no second turn
    for text in ("Reasoning.\nAnswer: mosh [1]", "mosh"):
        llm = TwoTurns(text, "Answer: tmate")
        answer_questions(llm, [QuerySolution(QUESTION, list(DOCS), [1.0, 0.5])], 5)
        assert len(llm.calls) == 1
