"""The README's two commands are what a fresh machine runs: they install the tested versions
(constraints.txt), show what pip is doing, and CI runs exactly the test command."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = Path(__file__).resolve().parent.parent


def _readme_commands() -> list[str]:
    block = ROOT.joinpath("README.md").read_text().split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.startswith("python3 -m venv")]


def test_the_readme_has_the_main_job_and_the_test_command():
    main, test = _readme_commands()
    assert main.endswith("hippo-engine demo")
    assert 'pytest -q -n 2 --dist loadfile -m "not slow and not integration"' in test
    assert test.endswith('pytest -q -n 2 --dist loadfile -m "slow or integration"')   # both tiers, two workers


def test_ci_runs_the_readme_test_command_exactly():
    assert _readme_commands()[1] in ROOT.joinpath(".ci/run").read_text().splitlines()


def test_both_commands_install_the_locked_versions_and_show_progress():
    for cmd in _readme_commands():
        assert "-c constraints.txt" in cmd, cmd
        assert not re.search(r"pip install\b[^&]*\s-q\b", cmd), f"pip -q hides a long build: {cmd}"


def test_the_lock_pins_every_direct_dependency():
    project = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"]) + [d for extra in project["optional-dependencies"].values() for d in extra]
    names = {re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0].lower().replace("_", "-") for d in wanted}
    pinned = {m.group(1).lower().replace("_", "-")
              for m in re.finditer(r"^([A-Za-z0-9_.\-]+)==", ROOT.joinpath("constraints.txt").read_text(), re.M)}
    assert names <= pinned, sorted(names - pinned)


def test_the_test_extra_builds_nothing_from_source():
    extras = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not any(d.startswith("llama-cpp-python") for d in extras["test"])


def test_fast_moving_dependencies_have_an_upper_bound():
    deps = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())["project"]["dependencies"]
    for name in ("openai", "dspy-ai", "litellm", "transformers", "torch"):
        spec = next(d for d in deps if re.match(rf"{name}\b", d))
        assert "<" in spec or "==" in spec, spec


def test_the_main_command_builds_llama_cpp_portably_as_the_engine_advises():
    """The CMAKE_ARGS of the README's main command are the engine's own advice (one source)."""
    from hippo_engine.llm.llamacpp import PORTABLE_CMAKE_ARGS
    assert f'CMAKE_ARGS="{PORTABLE_CMAKE_ARGS}"' in _readme_commands()[0]
