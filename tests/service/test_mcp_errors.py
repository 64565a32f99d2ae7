"""MCP tool arguments of the wrong kind get one short line naming the field, in a reader's words, not the
validator's report (issue 39, item 6): in-process over a fake memory, and over stdio with the official
client against ``hippo-engine mcp`` on a real (empty) memory."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from test_mcp_server import CountingMemory, FakeWorkspaces, call

from hippo_engine.service.mcp_server import build_mcp

ROOT = Path(__file__).resolve().parents[2]


CASES = [
    ("recall", {}, "recall: query: is required"),
    ("recall", {"query": 3}, "recall: query: must be text (a string)"),
    ("recall", {"query": ""}, "recall: query: must not be empty"),
    ("recall", {"query": "x", "top_k": "abc"}, "recall: top_k: must be a whole number"),
    ("recall", {"query": "x", "top_k": 2.5}, "recall: top_k: must be a whole number"),
    ("recall", {"query": "x", "top_k": 0}, "recall: top_k: must be at least 1"),
    ("recall", {"query": "x", "mode": "fancy"}, "recall: mode: must be one of hipporag2, naive, hi_local"),
    ("remember", {"texts": "one text"}, "remember: texts: must be a list"),
    ("remember", {"texts": []}, "remember: texts: must hold at least 1 item(s)"),
    ("remember", {"texts": [None]}, "remember: texts[0]: must be text (a string)"),
    ("remember", {"texts": ["a"], "wait": "maybe"}, "remember: wait: must be true or false"),
    ("answer", {"question": "q", "top_k": None}, "answer: top_k: must be a whole number"),
    ("forget", {"ids": "a"}, "forget: ids: must be a list"),
]

#: what the validator's own report says (none of it may reach the agent)
VALIDATOR_WORDS = ("Input should be", "Field required", "String should have", "pydantic", "input_value",
                   "validation error", "Traceback")


def _clean(text: str) -> None:
    assert not any(w in text for w in VALIDATOR_WORDS) and len(text) < 200, text


@pytest.mark.parametrize("name,args,message", CASES)
def test_a_wrong_argument_is_one_line_naming_the_field(name, args, message):
    mem = CountingMemory()

    async def script(c):
        return await c.call_tool(name, args)
    r = call(build_mcp(FakeWorkspaces(mem)), script)
    assert r.is_error and r.content[0].text.startswith(message), r.content[0].text
    _clean(r.content[0].text)
    assert mem.seen == []


@pytest.mark.slow        # the command opens the memory (the packaged embedder): about 10 s
def test_over_stdio_wrong_arguments_are_short_lines(tmp_path):
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=dict(os.environ),
                                   args=["-m", "hippo_engine.cli", "mcp", "--save-dir", str(tmp_path / "mem"),
                                         "--extractor", "ner", "--quiet"])

    async def main():
        with (tmp_path / "stderr.log").open("w") as err:
            async with Client(stdio_client(params, errlog=err)) as client:
                return [await client.call_tool(name, args) for name, args, _ in CASES]
    for r, (name, _, message) in zip(anyio.run(main), CASES, strict=True):
        assert r.is_error and r.content[0].text.startswith(message), (name, r.content[0].text[:300])
        _clean(r.content[0].text)
