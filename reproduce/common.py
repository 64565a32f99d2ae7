"""Helpers shared by the ``python -m reproduce`` commands: paths, the git commit, memory and load
figures, the ``uptime`` line and the machine, file hashes, report files, logging, and the LLM that must never be
called. The options every command repeats are in :mod:`reproduce.harness`."""
from __future__ import annotations

import hashlib
import logging
import os
import resource
import subprocess
from pathlib import Path

from hippo_engine.llm.base import LLMClient, LLMError

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "reproduce" / "results"
#: HippoRAG v1's MuSiQue training subset (100 questions, 1,890 passages) in the repository's sibling ``shared/``.
MUSIQUE_TRAIN_DIR = REPO_ROOT.parent / "shared" / "data" / "musique" / "hipporag_v1_train"
#: The released GPT-3.5 OpenIE file of that subset.
MUSIQUE_TRAIN_OPENIE = "openie_musique_train_results_ner_gpt-3.5-turbo-1106_1890.json"


def git_head(root: Path = REPO_ROOT) -> tuple[str, bool] | None:
    """``(short commit of the checkout at root, whether tracked files differ from it)``, or ``None``
    when git is not available."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=20, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha, bool(dirty)


def commit_label(dirty: str = "+dirty", unknown: str = "?", root: Path = REPO_ROOT) -> str:
    """A report's commit: the short hash followed by ``dirty`` when tracked files differ, or
    ``unknown`` when git is not available."""
    head = git_head(root)
    return unknown if head is None else head[0] + (dirty if head[1] else "")


def engine_commit() -> str:
    """The commit of the checkout ``hippo_engine`` is imported from (``+dirty`` when its tracked
    files differ), or ``?`` outside git."""
    import hippo_engine

    return commit_label(root=Path(hippo_engine.__file__).resolve().parents[1])


def uptime(missing: str | None = None) -> str:
    """``uptime``'s line (the load the figures were measured under); where the command is missing,
    ``missing``, or by default ``load average`` and the three load averages."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"load average {load_average(', ')}" if missing is None else missing


def machine() -> str:
    """CPU model, cores and the versions of the numeric libraries (the scores' last bits depend on them)."""
    from importlib.metadata import PackageNotFoundError, version

    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read().splitlines()
        cpu = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), "?")
        flags = next((ln.split(":", 1)[1].split() for ln in info if ln.startswith("flags")), [])
        cpu += " (AVX-512)" if "avx512f" in flags else ""
    except OSError:
        pass
    libs = []
    for name in ("torch", "numpy", "scipy"):
        try:
            libs.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            pass
    return f"{cpu}, {os.cpu_count()} cores; {', '.join(libs)}"


def _status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def peak_rss_mb() -> float:
    """Peak RSS of this process image in MiB. ``VmHWM``, not ``ru_maxrss`` (the fallback): Linux
    carries ru_maxrss over fork and exec, so a child would report its parent's peak."""
    hwm = _status_mb("VmHWM")
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    """Current RSS of this process in MiB (NaN where ``/proc`` is not available)."""
    v = _status_mb("VmRSS")
    return v if v is not None else float("nan")


def load_average(sep: str = "/") -> str:
    """The 1, 5 and 15-minute load averages joined by ``sep`` (``?`` where not available)."""
    try:
        return sep.join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_result(path: Path, text: str) -> Path:
    """Write a result file (UTF-8), creating its folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def setup_logging(verbose: bool = False) -> None:
    """Timestamped logging to stderr unless the caller configured logging already."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")


class ForbiddenLLM(LLMClient):
    """Any call is an error: proves the run made no LLM call."""

    model_name = "gpt-3.5-turbo-1106"  # the OpenIE file's model; the name only labels files
    calls = 0

    def generate(self, messages, **kw):
        ForbiddenLLM.calls += 1
        raise LLMError("an LLM call was made although every passage has an OpenIE result")


def module_main(module, argv=None) -> int:
    """``python -m reproduce.bench.<name>`` for a benchmark module with ``add_arguments(parser)``
    and ``run(args, argv)`` (the same as its ``python -m reproduce <command>``)."""
    import argparse
    import sys
    argv = list(sys.argv[1:] if argv is None else argv)
    name = getattr(getattr(module, "__spec__", None), "name", None) or module.__name__   # not "__main__"
    ap = argparse.ArgumentParser(prog=f"python -m {name}", description=module.__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(ap)
    return module.run(ap.parse_args(argv), argv)
