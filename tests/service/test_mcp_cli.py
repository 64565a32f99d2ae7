"""``hippo-engine mcp``: its flags reach the engine's options, and stdout stays clean for the protocol
(the command over a real stdio pipe: tests/service/integration/test_mcp_stdio.py)."""
from __future__ import annotations

import os
import subprocess
import sys

from hippo_engine.cli import build_parser
from hippo_engine.cli_mcp import DEFAULT_WAIT_S, rag_options, stdout_to_stderr


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
