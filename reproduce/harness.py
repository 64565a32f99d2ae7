"""The options the ``python -m reproduce`` commands share, written once.

A command's ``add_arguments(parser)`` adds a shared option with :func:`option` (by its flag, in the
place the command wants it in its ``--help``), changing only what differs for that command (its
default, its help line), and the reliability benchmarks' report options with :func:`report_options`.
The report's provenance (commit, ``uptime``, machine) is in :mod:`reproduce.common`.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import MUSIQUE_TRAIN_DIR, REPO_ROOT

#: the ``rankings`` command's index folders, which several commands read
RANKINGS_WORK = Path("outputs/reproduce/rankings")
#: ``table-recall-llm-free``'s indexes and encoder cache
RECALL_WORK = REPO_ROOT / "outputs" / "reproduce" / "recall-llm-free"
#: the shared data folder beside the repository
DATA_ROOT = REPO_ROOT.parent / "shared" / "data"
#: the encoders of the reliability benchmarks: the engine's own or a fast fake (tests)
ENCODERS = ("real", "fake")

#: flag -> the keywords of ``add_argument`` that most commands give it
SHARED: dict[str, dict[str, Any]] = {
    "--data": {"type": Path, "default": MUSIQUE_TRAIN_DIR, "help": "the MuSiQue subset (default %(default)s)"},
    "--data-root": {"type": Path, "default": DATA_ROOT, "help": "the data root"},
    "--embedder": {"default": None, "help": "embedding model (default: the engine's)"},
    "--verbose": {"flags": ("-v", "--verbose"), "action": "store_true", "help": "debug logging"},
    "--limit": {"type": int, "default": None, "help": "only the first N questions"},
    "--work": {"type": Path, "default": RANKINGS_WORK, "help": "work folder (emptied first)"},
    "--out": {"type": Path, "default": None, "help": "result markdown"},
    "--encoder": {"choices": ENCODERS, "default": "real", "help": "real (the engine's) or fake (tests)"},
    "--minutes": {"type": float, "default": None, "help": "start nothing new after this many minutes"},
}


def option(ap: argparse.ArgumentParser, flag: str, **changes: Any) -> None:
    """Add the shared option ``flag`` (a key of :data:`SHARED`) to ``ap``, with ``changes`` to its
    keywords (``help=None`` drops the help line). ``--data-root`` is added as ``--data``."""
    spec = {**SHARED[flag], **changes}
    flags = spec.pop("flags", ("--data",) if flag == "--data-root" else (flag,))
    ap.add_argument(*flags, **{k: v for k, v in spec.items() if v is not None or k != "help"})


def report_options(ap: argparse.ArgumentParser, name: str, *hidden: str) -> None:
    """A reliability benchmark's report options: ``--name`` (default ``name``) and ``--out-dir``,
    then the ``hidden`` options its child processes take (no help line)."""
    ap.add_argument("--name", default=name, help="report name under reproduce/results/reliability/")
    ap.add_argument("--out-dir", type=Path, default=None, help="report folder (default reproduce/results/reliability)")
    for flag in hidden:
        ap.add_argument(flag, default=None, help=argparse.SUPPRESS)


def without_options(argv: Sequence[str], names: Sequence[str]) -> list[str]:
    """``argv`` without the options ``names`` and their values (``--name value`` or ``--name=value``)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in names:
            skip = True
        elif not a.startswith(tuple(f"{n}=" for n in names)):
            out.append(a)
    return out
