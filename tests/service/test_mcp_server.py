"""The MCP tools over a fake Memory (the real one: tests/service/integration/test_mcp_*.py), called
through the SDK's own client connected in-process."""
from __future__ import annotations

import hashlib
import json
import threading

import anyio
import pytest
from mcp import Client

from hippo_engine.service.limits import Limits
from hippo_engine.service.mcp_models import explain_line
from hippo_engine.service.mcp_server import build_mcp
from hippo_engine.service.settings import ServiceSettings


def _doc_id(text: str) -> str:
    return "doc-" + hashlib.md5(text.encode()).hexdigest()


class FakeMemory:
    """The Memory interface on a dict: a document is indexed after ``polls`` job() calls (as if a
    background worker ran), a text containing FAIL fails; retrieval scores shared words."""

    def __init__(self, polls: int = 1):
        self.docs: dict[str, dict] = {}
        self.jobs: dict[str, list[str]] = {}
        self.polls = polls
        self.job_calls = 0
        self.lock = threading.Lock()
        self.calls: list[tuple] = []

    def add(self, docs):
        ids = []
        for d in docs:
            if not isinstance(d.get("text"), str) or not d["text"].strip():
                raise ValueError("documents[0].text: must be a non-empty string")
            ids.append(d.get("id") or _doc_id(d["text"]))
        job = f"job-{len(self.jobs) + 1}"
        for i, d in zip(ids, docs, strict=True):
            self.docs[i] = {"id": i, "text": d["text"], "status": "pending", "error": None}
        self.jobs[job] = ids
        return {"job_id": job, "documents": ids}

    def job(self, job_id):
        with self.lock:
            self.job_calls += 1
            if self.job_calls % self.polls == 0:
                for i in self.jobs.get(job_id, []):
                    d = self.docs.get(i)
                    if d and d["status"] == "pending":
                        d["status"], d["error"] = ("failed", "extractor broke") if "FAIL" in d["text"] else \
                            ("indexed", None)
                        break
        if job_id not in self.jobs:
            return None
        docs = [self.docs[i] for i in self.jobs[job_id] if i in self.docs]
        count = {s: sum(d["status"] == s for d in docs) for s in ("pending", "processing", "indexed", "failed")}
        return {"job_id": job_id, "status": "done" if not count["pending"] else "processing",
                "progress": {"total": len(docs), **count},
                "documents": [{"id": d["id"], "status": d["status"], "error": d["error"]} for d in docs]}

    def documents(self, status=None, offset=0, limit=50):
        found = [d for d in self.docs.values() if status is None or d["status"] == status]
        return {"documents": found[offset:offset + limit], "total": len(found), "offset": offset, "limit": limit}

    def delete(self, ids):
        deleted = [i for i in ids if self.docs.pop(i, None) is not None]
        return {"deleted": deleted, "unknown": [i for i in ids if i not in deleted]}

    def _ranked(self, query, top_k):
        words = set(query.lower().split())
        scored = [(len(words & set(d["text"].lower().split())) / (len(words) or 1), d)
                  for d in self.docs.values() if d["status"] == "indexed"]
        scored = [x for x in sorted(scored, key=lambda x: -x[0]) if x[0] > 0][:top_k]
        return [{"id": "chunk-" + d["id"], "text": d["text"], "score": s, "doc_ids": [d["id"]], "rank": r + 1}
                for r, (s, d) in enumerate(scored)]

    def retrieve(self, queries, *, top_k=5, mode=None, explain=False, where=None):
        self.calls.append(("retrieve", mode, explain))
        if mode not in (None, "hipporag2", "naive"):
            raise ValueError(f"mode {mode!r} needs an index built with communities")
        out = []
        for q in queries:
            ps = self._ranked(q, top_k)
            res = {"query": q, "mode": mode or "hipporag2", "passages": ps}
            if explain:
                res["explanations"] = [{"passage_id": p["id"], "placed_by": "ppr", "score": 1.0, "dense_prior": 0.2,
                                        "dense_score": 0.5, "dense_rank": 1, "seeds": [
                                            {"entity": p["text"].split()[0], "share": 0.62, "weight": 1.0},
                                            {"entity": "other", "share": 0.18, "weight": 0.5}]} for p in ps]
            out.append(res)
        return out

    def answer(self, question, *, top_k=5, mode=None, where=None):
        ps = self._ranked(question, top_k)
        if not ps:
            return {"question": question, "answer": "", "citations": [], "passages": [],
                    "notes": ["no passage found"]}
        top = ps[0]
        return {"question": question, "answer": top["text"].split()[0], "passages": ps, "notes": [],
                "citations": [{"id": top["id"], "text": top["text"], "doc_ids": top["doc_ids"]}]}

    def stats(self):
        by = {s: sum(d["status"] == s for d in self.docs.values()) for s in ("pending", "indexed", "failed")}
        return {"documents": by, "passages": by["indexed"], "extractor": "ner", "storage": "sqlite",
                "version": "0.1.0"}


class FakeWorkspaces:
    def __init__(self, memory):
        self.memory, self.asked = memory, []

    def get(self, name, *, create):
        self.asked.append((name, create))
        if name == "missing":
            raise KeyError("workspace 'missing' does not exist")
        return self.memory


def call(server, script):
    """Run ``script(client)`` against ``server`` in-process; returns what it returns."""
    async def main():
        async with Client(server) as client:
            return await script(client)
    return anyio.run(main)


def data(result) -> dict:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    assert json.loads(result.content[0].text) == result.structured_content    # the text is the same JSON
    return result.structured_content


def test_tools_are_listed_with_descriptions_schemas_and_hints():
    tools = call(build_mcp(FakeWorkspaces(FakeMemory())), lambda c: c.list_tools())
    by = {t.name: t for t in tools.tools}
    assert set(by) == {"remember", "recall", "answer", "forget", "memory_stats"}
    for t in by.values():
        assert len(t.description) > 150 and t.output_schema and t.output_schema.get("properties")
    assert by["remember"].input_schema["required"] == ["texts"]
    assert "ctx" not in by["remember"].input_schema["properties"]
    assert by["recall"].input_schema["properties"]["top_k"]["maximum"] == ServiceSettings.max_top_k
    assert "hipporag2" in json.dumps(by["recall"].input_schema["properties"]["mode"])
    assert by["forget"].annotations.destructive_hint and by["recall"].annotations.read_only_hint
    assert "45 s" in by["remember"].description
    assert set(by["recall"].output_schema["properties"]) >= {"query", "passages"}


def test_remember_waits_until_indexed_then_recall_answer_forget():
    mem = FakeMemory()
    ws = FakeWorkspaces(mem)
    texts = ["Marrow mapped Lake Veloria", "Velor hosts the Amber Fair", "Brask lies on the Tamsin River"]

    async def script(c):
        out = {"remember": data(await c.call_tool("remember", {"texts": texts, "ids": ["a", "b", "c"]}))}
        out["recall"] = data(await c.call_tool("recall", {"query": "who mapped lake veloria", "top_k": 2}))
        out["answer"] = data(await c.call_tool("answer", {"question": "who mapped lake veloria"}))
        out["forget"] = data(await c.call_tool("forget", {"ids": ["a", "zzz"]}))
        out["after"] = data(await c.call_tool("recall", {"query": "who mapped lake veloria"}))
        out["stats"] = data(await c.call_tool("memory_stats", {}))
        return out

    out = call(build_mcp(ws), script)
    r = out["remember"]
    assert r["documents"] == ["a", "b", "c"] and r["status"] == "indexed" and r["indexed"] == 3
    assert r["indexing"] == 0 and r["failed"] == [] and "recall finds them now" in r["message"]
    top = out["recall"]["passages"][0]
    assert top["id"] == "a" and top["document_ids"] == ["a"] and top["passage_id"] == "chunk-a"
    assert top["rank"] == 1 and top["text"] == texts[0] and top["explanation"] == \
        "via 'Marrow' 62%, 'other' 18%; dense prior 20%"
    assert out["recall"]["mode"] == "hipporag2" and out["recall"]["not_yet_searchable"] == 0
    assert ("retrieve", None, True) in mem.calls                     # hipporag2 asks for explanations
    a = out["answer"]
    assert a["answer"] == "Marrow" and [c["id"] for c in a["citations"]] == ["a"]
    assert a["citations"][0]["passage_id"] == "chunk-a" and a["citations"][0]["text"] == texts[0]
    assert out["forget"]["deleted"] == ["a"] and out["forget"]["unknown"] == ["zzz"]
    assert "1 id(s) not in memory" in out["forget"]["message"]
    assert all(p["id"] != "a" for p in out["after"]["passages"])
    s = out["stats"]
    assert s["workspace"] == "default" and s["documents"]["indexed"] == 2
    assert s["stats"]["extractor"] == "ner" and "documents" not in s["stats"]
    assert set(ws.asked) == {(None, True)}


def test_remember_wait_is_bounded_and_says_so():
    mem = FakeMemory(polls=10**9)                                   # the worker never gets to them

    async def script(c):
        return data(await c.call_tool("remember", {"texts": ["one", "two"]}))

    server = build_mcp(FakeWorkspaces(mem), wait_s=0.5)
    r = call(server, script)
    assert r["status"] == "indexing" and r["indexing"] == 2 and r["indexed"] == 0
    assert 0.5 <= r["waited_s"] < 3 and "still indexing after the 0.5 s wait" in r["message"]
    assert r["documents"] == [_doc_id("one"), _doc_id("two")]

    async def recall(c):
        return data(await c.call_tool("recall", {"query": "one"}))
    assert call(server, recall)["not_yet_searchable"] == 2


def test_remember_without_waiting_and_with_failures():
    mem = FakeMemory()

    async def script(c):
        return (data(await c.call_tool("remember", {"texts": ["later"], "wait": False})),
                data(await c.call_tool("remember", {"texts": ["good one", "FAIL this"]})))

    queued, mixed = call(build_mcp(FakeWorkspaces(mem)), script)
    assert queued["status"] == "indexing" and queued["waited_s"] == 0 and "queued" in queued["message"]
    assert mixed["status"] == "partly failed" and mixed["failed"] == [
        {"id": _doc_id("FAIL this"), "error": "extractor broke"}]
    assert "1 failed" in mixed["message"] and "extractor broke" in mixed["message"]


def test_progress_is_reported_while_waiting():
    seen = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    async def script(c):
        return data(await c.call_tool("remember", {"texts": ["x y", "y z", "z w"]}, progress_callback=on_progress))

    r = call(build_mcp(FakeWorkspaces(FakeMemory())), script)
    assert r["status"] == "indexed"
    assert seen and seen[-1][:2] == (3, 3) and seen[-1][2] == "3 of 3 indexed"


@pytest.mark.parametrize("name,args,message", [
    ("remember", {"texts": ["a", "b"], "ids": ["x"]}, "one id per text (1 ids for 2 texts)"),
    ("remember", {"texts": ["  "]}, "texts[0]: must hold a character that is not white space"),
    ("remember", {"texts": ["ok", "one NUL\x00"]}, "texts[1]: must hold a character that is not white space, and no"),
    ("recall", {"query": "\x00"}, "query: must hold a character that is not white space, and no NUL"),
    ("answer", {"question": " \x00"}, "question: must hold a character"),
    ("remember", {"texts": []}, "texts"),
    ("recall", {"query": "x", "top_k": 0}, "top_k"),
    ("recall", {"query": "x", "mode": "fancy"}, "mode"),
    ("recall", {"query": "x", "mode": "hi_local"}, "needs an index built with communities"),
    ("forget", {"ids": []}, "ids"),
    ("answer", {}, "question"),
])
def test_bad_input_is_a_tool_error_with_a_message(name, args, message):
    async def script(c):
        return await c.call_tool(name, args)
    r = call(build_mcp(FakeWorkspaces(FakeMemory())), script)
    assert r.is_error and message in r.content[0].text and "Traceback" not in r.content[0].text


def test_a_missing_workspace_is_a_tool_error():
    async def script(c):
        return await c.call_tool("memory_stats", {})
    r = call(build_mcp(FakeWorkspaces(FakeMemory()), "missing"), script)
    assert r.is_error and "workspace 'missing' does not exist" in r.content[0].text


def test_explain_line():
    exp = {"placed_by": "ppr", "score": 2.0, "dense_prior": 0.5, "dense_score": 0.7, "dense_rank": 3,
           "seeds": [{"entity": "b", "share": 0.1}, {"entity": "a", "share": 0.5}, {"entity": "c", "share": 0.05},
                     {"entity": "d", "share": 0.06}, {"entity": "e", "share": 0.04}, {"entity": "f", "share": 0.001}]}
    assert explain_line(exp) == "via 'a' 50%, 'b' 10%, 'd' 6%, 3 other seed(s) 9%; dense prior 25%"
    assert explain_line({**exp, "placed_by": "dense_first"}).startswith(
        "placed first by dense similarity (dense rank 3); graph: via 'a' 50%")
    assert explain_line({**exp, "placed_by": "dense_agree", "dense_rank": 1}).startswith(
        "placed first by dense similarity (dense rank 1); graph: via 'a' 50%")
    assert explain_line({**exp, "placed_by": "second_hop_head"}) == explain_line(exp)
    assert explain_line({**exp, "placed_by": "dense_fallback", "fallback_reason": "no entity matched"}) == \
        "dense similarity 0.70 (dense rank 3); no graph walk: no entity matched"
    assert explain_line({**exp, "placed_by": "dense"}) == "dense similarity 0.70 (dense rank 3)"
    assert explain_line({**exp, "seeds": [{"entity": "x" * 60, "share": 0.002}], "dense_prior": 0.0}) == \
        "graph walk from 1 seed(s), none above 1%; dense prior <1%"
    assert explain_line({**exp, "seeds": [{"entity": "x", "share": 0.0}], "dense_prior": 2.0}) == \
        "no query entity leads here: dense prior only (its similarity to the query)"
    assert explain_line({**exp, "seeds": []}) == "graph walk from 0 seed(s), none above 1%; dense prior 25%"
    long = explain_line({**exp, "seeds": [{"entity": "word " * 20, "share": 0.9}]})
    assert long.startswith("via '" + ("word " * 8).strip()[:37]) and "...' 90%" in long
    assert explain_line(None, "naive") == "dense similarity to the query"
    assert explain_line(None, "hi_local") == "ranked by the hi_local mode"


def test_recall_in_the_naive_mode_asks_for_no_explanations():
    mem = FakeMemory()

    async def script(c):
        data(await c.call_tool("remember", {"texts": ["alpha beta", "beta gamma"], "ids": ["a", "b"]}))
        return data(await c.call_tool("recall", {"query": "alpha", "mode": "naive"}))

    got = call(build_mcp(FakeWorkspaces(mem)), script)
    assert ("retrieve", "naive", False) in mem.calls and got["mode"] == "naive"
    assert [(p["id"], p["explanation"]) for p in got["passages"]] == [("a", "dense similarity to the query")]


def test_building_the_server_leaves_root_logging_alone(monkeypatch):
    """The SDK's server calls ``logging.basicConfig`` when built; in a host application with no
    logging configured yet that would add the SDK's handler to the root logger."""
    import logging
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.ERROR)
    build_mcp(FakeWorkspaces(FakeMemory()))
    assert root.handlers == [] and root.level == logging.ERROR


# ------------------------------------------------------------------ one set of limits for every door (issue 37)
LIMITS = Limits(max_batch=3, max_queries=2, max_query_chars=50, max_top_k=10, max_text_chars=100)


class CountingMemory(FakeMemory):
    """A FakeMemory that records every call, so a test can say a refused call reached nothing."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __getattribute__(self, name):
        if name in ("add", "retrieve", "answer", "delete", "stats"):
            object.__getattribute__(self, "seen").append(name)
        return object.__getattribute__(self, name)


def _error(server, name, args) -> str:
    async def script(c):
        return await c.call_tool(name, args)
    r = call(server, script)
    assert r.is_error, r
    text = r.content[0].text
    assert "Traceback" not in text and "pydantic" not in text and "input_value" not in text, text
    assert len(text) < 300, text
    return text


def test_the_limits_are_the_http_apis_and_published_in_the_schemas():
    settings = ServiceSettings(save_dir="x", max_batch=7, max_queries=3, max_query_chars=60, max_top_k=12,
                               max_text_chars=99)
    assert Limits.of(settings) == Limits(max_batch=7, max_queries=3, max_query_chars=60, max_top_k=12,
                                         max_text_chars=99)
    assert Limits() == Limits.of(ServiceSettings(save_dir="x"))       # the defaults are the server's
    tools = call(build_mcp(FakeWorkspaces(FakeMemory()), limits=Limits.of(settings)), lambda c: c.list_tools())
    props = {t.name: t.input_schema["properties"] for t in tools.tools}
    assert props["remember"]["texts"]["maxItems"] == 7 and props["remember"]["texts"]["items"]["maxLength"] == 99
    assert props["recall"]["query"]["maxLength"] == 60 and props["recall"]["top_k"]["maximum"] == 12
    assert props["answer"]["question"]["maxLength"] == 60 and props["answer"]["top_k"]["maximum"] == 12
    assert props["forget"]["ids"]["maxItems"] == 7


@pytest.mark.parametrize("name,args,message", [
    ("remember", {"texts": ["a", "b", "c", "d"]}, "remember: texts: 4 items in one call is over the limit of 3"),
    ("remember", {"texts": ["ok", "x" * 101]}, "remember: texts[1]: 101 characters long; the limit is 100"),
    ("remember", {"texts": ["a"], "ids": ["a", "b", "c", "d"]}, "ids: 4 items in one call is over the limit of 3"),
    ("recall", {"query": "q" * 51}, "recall: query: 51 characters long; the limit is 50"),
    ("recall", {"query": "q", "top_k": 11}, "recall: top_k: 11 is over the limit of 10"),
    ("answer", {"question": "q" * 51}, "answer: question: 51 characters long; the limit is 50"),
    ("answer", {"question": "q", "top_k": 11}, "answer: top_k: 11 is over the limit of 10"),
    ("forget", {"ids": ["a", "b", "c", "d"]}, "forget: ids: 4 items in one call is over the limit of 3"),
])
def test_a_call_over_a_limit_is_a_short_tool_error_and_reaches_nothing(name, args, message):
    mem = CountingMemory()
    assert message in _error(build_mcp(FakeWorkspaces(mem), limits=LIMITS), name, args)
    assert mem.seen == []


def test_the_default_limits_hold_without_settings():
    """``hippo-engine mcp`` (stdio) builds the server without a ServiceSettings: the same defaults hold
    (1,500 texts, a 1 MB query and a text over a million characters were accepted before)."""
    mem, d = CountingMemory(), ServiceSettings
    server = build_mcp(FakeWorkspaces(mem))
    assert f"over the limit of {d.max_batch}" in _error(server, "remember", {"texts": ["t"] * (d.max_batch + 1)})
    assert f"the limit is {d.max_text_chars:,}" in _error(server, "remember", {"texts": ["t" * (d.max_text_chars + 1)]})
    assert f"the limit is {d.max_query_chars:,}" in _error(server, "recall", {"query": "q" * 1_080_000})
    assert f"over the limit of {d.max_top_k}" in _error(server, "recall", {"query": "q", "top_k": d.max_top_k + 1})
    assert mem.seen == []


@pytest.mark.parametrize("name,args,unknown", [
    ("recall", {"query": "x", "topk": 3}, "'topk'"),
    ("remember", {"texts": ["a"], "metadata": {"a": 1}, "wait_s": 1}, "'metadata', 'wait_s'"),
    ("memory_stats", {"verbose": True}, "'verbose'"),
    ("forget", {"ids": ["a"], "all": True}, "'all'"),
])
def test_an_unknown_argument_is_refused_by_name(name, args, unknown):
    mem = CountingMemory()
    text = _error(build_mcp(FakeWorkspaces(mem)), name, args)
    assert f"{name}: unknown argument(s) {unknown}" in text and "takes" in text
    assert mem.seen == []


def test_the_arguments_each_tool_takes_are_those_of_its_schema():
    server = build_mcp(FakeWorkspaces(FakeMemory()))
    tools = call(server, lambda c: c.list_tools())
    assert {t.name: tuple(t.input_schema.get("properties", {})) for t in tools.tools} == server.tool_arguments


@pytest.mark.parametrize("name,args", [("forget", {"ids": ["a\x00b"]}), ("forget", {"ids": ["ok", "x\n"]}),
                                       ("remember", {"texts": ["t"], "ids": ["\x00"]})])
def test_ids_with_a_control_character_never_reach_the_memory(name, args):
    mem = CountingMemory()
    assert "no control characters" in _error(build_mcp(FakeWorkspaces(mem)), name, args)
    assert mem.seen == []
