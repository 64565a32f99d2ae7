"""Prompt files, shipped as package data (installed as ``hippo_engine.prompts``).

Every prompt text the engine sends to an LLM lives as a file in this package; code loads it by
name through :mod:`importlib.resources` and never carries prompt wording inline. This module is
the only place that knows where the files are.
"""
from __future__ import annotations

import json
import logging
from importlib import resources
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def prompts_dir() -> Path:
    """Return the absolute path of the folder that holds the prompt files."""
    return Path(str(resources.files(__name__)))


def available_prompts() -> list[str]:
    """Names (paths relative to :func:`prompts_dir`) of all prompt files, sorted."""
    root = prompts_dir()
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and p.suffix in (".json", ".txt"))


def prompt_path(name: str) -> Path:
    """Absolute path of the prompt file ``name`` (relative to :func:`prompts_dir`).

    Raises ``ValueError`` for names that would leave the prompts folder and
    ``FileNotFoundError`` (listing the available files) when the file does not exist.
    """
    root = prompts_dir().resolve()
    candidate = (root / name).resolve()
    if Path(name).is_absolute() or (candidate != root and root not in candidate.parents):
        raise ValueError(f"prompt name {name!r} must be a path inside {root}")
    if not candidate.is_file():
        listing = ", ".join(available_prompts()) or "(none)"
        raise FileNotFoundError(f"no prompt file {name!r} in {root}; available prompt files: {listing}")
    return candidate


def load_prompt(name: str) -> str:
    """Return the text of the prompt file ``name`` (UTF-8)."""
    return prompt_path(name).read_text(encoding="utf-8")


def load_json_prompt(name: str) -> Any:
    """Return the parsed content of the JSON prompt file ``name``."""
    path = prompt_path(name)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"prompt file {path} is not valid JSON: {e}") from e
