"""The command line's surface: what a command imports before it runs, and what its help offers.

Run in subprocesses: each checks a fresh interpreter's ``sys.modules``, which this test process
(with the engine imported by other tests) cannot show."""
from __future__ import annotations

import subprocess
import sys

import pytest

from hippo_engine.cli import build_parser

HEAVY = ("torch", "dspy", "litellm", "scipy", "igraph", "transformers", "spacy", "numpy", "openai")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_cli_module_imports_no_heavy_library():
    """``--help`` and input errors must not wait for torch or dspy to load."""
    loaded = _modules_after("import hippo_engine.cli")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_the_engine_imports_dspy_only_when_the_filter_is_used():
    loaded = _modules_after("from hippo_engine import HippoRAG")
    assert "hippo_engine.hipporag" in loaded
    assert not loaded & {"dspy", "litellm"}, sorted(loaded & {"dspy", "litellm"})


def test_help_and_an_input_error_exit_without_the_engine(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hippo_engine.cli", "stats", "--save-dir", str(tmp_path / "typo")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no index in" in r.stderr and "Traceback" not in r.stderr


def _help(command: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return sub.format_help()


@pytest.mark.parametrize("command", ["stats", "delete"])
def test_commands_that_call_no_llm_offer_no_llm_flags(command):
    text = _help(command)
    for flag in ("--llm ", "--llm-base-url", "--api-key", "--llm-timeout", "--llm-concurrency", "--llm-backend"):
        assert flag not in text, f"{command} --help offers {flag}"
    assert "--save-dir" in text and "--storage" in text


@pytest.mark.parametrize("command", ["stats", "delete", "retrieve", "qa"])
def test_commands_that_refuse_a_missing_index_do_not_promise_to_create_it(command):
    assert "created if missing" not in _help(command)


@pytest.mark.parametrize("command", ["index", "demo", "serve"])
def test_commands_that_create_an_index_say_so(command):
    assert "created if missing" in _help(command)
