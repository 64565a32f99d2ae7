"""``hippo-engine mcp``: its flags reach the engine's options, stdout stays clean for the protocol, and
the HTTP API's limits hold over stdio (the official MCP client; the whole flow over a real stdio pipe:
tests/service/integration/test_mcp_flow.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from hippo_engine.cli import build_parser
from hippo_engine.cli.common import rag_options
from hippo_engine.cli.mcp import DEFAULT_MAX_BATCH, DEFAULT_WAIT_S, limits, stdout_to_stderr
from hippo_engine.service.limits import Limits
from hippo_engine.service.settings import ServiceSettings

ROOT = Path(__file__).resolve().parents[2]


def test_flags_become_engine_options():
    args = build_parser().parse_args(["mcp", "--save-dir", "d", "--extractor", "ner", "--llm", "m", "--llm-base-url",
                                      "http://127.0.0.1:1/v1", "--llm-timeout", "5", "--no-filter", "--linking",
                                      "ner", "--dsn", "postgresql://x", "--workspace", "notes", "--wait", "2.5"])
    assert args.workspace == "notes" and args.wait == 2.5
    assert rag_options(args) == {"llm_model_name": "m", "embedding_model_name": None, "extractor": "ner",
                                 "llm_base_url": "http://127.0.0.1:1/v1", "llm_timeout": 5.0, "use_filter": False,
                                 "linking": "ner", "storage_backend": "postgres", "postgres_dsn": "postgresql://x",
                                 "show_progress": False}
    plain = build_parser().parse_args(["mcp", "--save-dir", "d"])
    assert plain.wait == DEFAULT_WAIT_S and plain.workspace is None
    assert limits(plain) == Limits() and DEFAULT_MAX_BATCH == ServiceSettings.max_batch
    assert limits(build_parser().parse_args(["mcp", "--save-dir", "d", "--max-batch", "7"])) == Limits(max_batch=7)
    assert rag_options(plain) == {"llm_model_name": None, "embedding_model_name": None, "show_progress": False}


def test_stdout_goes_to_stderr_meanwhile(capfd):
    print("before")
    with stdout_to_stderr():
        print("python print")
        os.write(1, b"native write\n")
    print("after")
    out, err = capfd.readouterr()
    assert out == "before\nafter\n" and "python print" in err and "native write" in err


def test_a_bad_wait_is_a_usage_error():
    r = subprocess.run([sys.executable, "-m", "hippo_engine.cli", "mcp", "--save-dir", "x", "--wait", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--wait" in r.stderr and r.stdout == ""


def test_a_bad_max_batch_is_a_usage_error():
    r = subprocess.run([sys.executable, "-m", "hippo_engine.cli", "mcp", "--save-dir", "x", "--max-batch", "0"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--max-batch" in r.stderr and r.stdout == ""


@pytest.mark.slow        # the command opens the memory (the packaged embedder): about 10 s
def test_over_stdio_the_http_apis_limits_hold(tmp_path):
    """``hippo-engine mcp`` with the official client over stdio (the client starts the command): 1,001 texts,
    a text of 1,000,001 characters, a 1 MB query (it ran 50 s), a top_k of 201, an unknown argument and
    a NUL id are each a short tool error at once, and nothing was stored."""
    d = ServiceSettings
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=dict(os.environ),
                                   args=["-m", "hippo_engine.cli", "mcp", "--save-dir", str(tmp_path / "mem"),
                                         "--extractor", "ner", "--quiet"])
    calls = [("remember", {"texts": [f"note {i}" for i in range(d.max_batch + 1)], "wait": False},
              f"{d.max_batch + 1} items in one call is over the limit of {d.max_batch}"),
             ("remember", {"texts": ["x" * (d.max_text_chars + 1)], "wait": False},
              f"texts[0]: {d.max_text_chars + 1:,} characters long; the limit is {d.max_text_chars:,}"),
             ("recall", {"query": "q" * 1_080_000}, f"query: 1,080,000 characters long; the limit is "
                                                     f"{d.max_query_chars:,}"),
             ("recall", {"query": "q", "top_k": d.max_top_k + 1}, f"over the limit of {d.max_top_k}"),
             ("recall", {"query": "q", "topk": 3}, "recall: unknown argument(s) 'topk'"),
             ("forget", {"ids": ["a\x00b"]}, "forget: ids[0]: must be an id")]

    async def main():
        with (tmp_path / "stderr.log").open("w") as err:
            async with Client(stdio_client(params, errlog=err)) as client:
                out = []
                for name, args, _ in calls:
                    t0 = time.monotonic()
                    r = await client.call_tool(name, args)
                    out.append((r, time.monotonic() - t0))
                stats = await client.call_tool("memory_stats", {})
                return out, stats
    out, stats = anyio.run(main)
    for (r, seconds), (name, _, message) in zip(out, calls, strict=True):
        assert r.is_error and message in r.content[0].text, (name, r.content[0].text[:300])
        assert len(r.content[0].text) < 300 and seconds < 5, (name, seconds)
    assert not stats.is_error and sum(stats.structured_content["documents"].values()) == 0
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()
