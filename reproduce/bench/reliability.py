"""Shared parts of the reliability benchmarks (``kill-harness``, ``two-writers``, ``memory-check``):
the MuSiQue passages with their released OpenIE results (no LLM call), the encoder (the engine's
real one, or the tests' n-gram fake for quick runs), an encoder that remembers vectors (clean
builds in the checking process cost no forward pass), and the result files.

Result files go to ``reproduce/results/reliability/<name>.md`` (the table) and ``<name>.json``
(every figure), like the other benchmark reports.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hippo_engine import HippoRAG
from hippo_engine.ids import chunk_id
from hippo_engine.models.encoder import Encoder

from ..common import MUSIQUE_TRAIN_DIR, MUSIQUE_TRAIN_OPENIE, REPO_ROOT, RESULTS_DIR, ForbiddenLLM, write_result
from ..harness import ENCODERS

RELIABILITY_DIR = RESULTS_DIR / "reliability"


def passage_id(text: str) -> str:
    """The id the engine gives a passage."""
    return chunk_id(text)


def musique_passages(n: int, data: Path = MUSIQUE_TRAIN_DIR) -> list[str]:
    """The first ``n`` distinct passages (``title\\ntext``) of the MuSiQue training subset."""
    corpus = json.loads((Path(data) / "musique_train_corpus.json").read_text(encoding="utf-8"))
    out = list(dict.fromkeys(f"{d['title']}\n{d['text']}" for d in corpus))
    if n > len(out):
        raise ValueError(f"the corpus in {data} has {len(out)} distinct passages, {n} asked for")
    return out[:n]


def musique_questions(data: Path = MUSIQUE_TRAIN_DIR) -> list[str]:
    """The questions of the MuSiQue training subset."""
    return [q["question"] for q in json.loads((Path(data) / "musique_train.json").read_text(encoding="utf-8"))]


def write_openie_subset(passages: Sequence[str], path: Path, data: Path = MUSIQUE_TRAIN_DIR) -> Path:
    """The released OpenIE entries of ``passages`` as a file of their own (imports stay small)."""
    released = json.loads((Path(data) / MUSIQUE_TRAIN_OPENIE).read_text(encoding="utf-8"))
    wanted = set(passages)
    docs = [d for d in released["docs"] if d.get("passage") in wanted]
    missing = len(wanted) - len({d["passage"] for d in docs})
    if missing:
        raise ValueError(f"{missing} passage(s) have no entry in the released OpenIE file")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"docs": docs}), encoding="utf-8")
    return path


def make_encoder(kind: str) -> Encoder | None:
    """``"real"``: ``None`` (the engine makes its default encoder); ``"fake"``: the tests'
    deterministic n-gram encoder (quick runs; the point is then not the embedder)."""
    if kind == "real":
        return None
    if kind == "fake":
        tests = str(REPO_ROOT / "tests")
        if tests not in sys.path:
            sys.path.insert(0, tests)
        from fakes import NgramEncoder
        return NgramEncoder()
    raise ValueError(f"encoder must be one of {ENCODERS}, got {kind!r}")


def real_encoder() -> Encoder:
    """The engine's default encoder, built as ``HippoRAG.encoder`` builds it."""
    from hippo_engine.config import HippoConfig
    from hippo_engine.models.assets import DEFAULT_EMBEDDER
    from hippo_engine.models.encoder import TransformersEncoder
    cfg = HippoConfig()
    return TransformersEncoder(DEFAULT_EMBEDDER, batch_size=cfg.embedding_batch_size, dtype=cfg.embedding_dtype,
                               max_length=cfg.embedding_max_length, num_workers=cfg.embedding_num_workers)


class MemoEncoder(Encoder):
    """Wraps an encoder and remembers each (instruction, text) vector; same name and size. The
    real encoder gives a text the same vector whatever batch it is in, so a remembered vector
    is the vector a fresh run would compute."""

    def __init__(self, inner: Encoder):
        self.inner, self.name = inner, inner.name
        self._memo: dict[tuple[str | None, str], np.ndarray] = {}
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:  # type: ignore[override]
        """The inner encoder's size."""
        return self.inner.dim

    def encode(self, texts: Sequence[str], *, instruction: str | None = None, show_progress: bool = False,
               desc: str = "Encoding") -> np.ndarray:
        """Vectors of ``texts``; only texts not seen before reach the inner encoder."""
        with self._lock:
            todo = list(dict.fromkeys(t for t in texts if (instruction, t) not in self._memo))
            if todo:
                vecs = self.inner.encode(todo, instruction=instruction, show_progress=show_progress, desc=desc)
                for t, v in zip(todo, vecs, strict=True):
                    self._memo[(instruction, t)] = np.array(v, dtype=np.float32)
            if not texts:
                return np.zeros((0, self.inner.dim), np.float32)
            return np.stack([self._memo[(instruction, t)] for t in texts])


def open_engine(save_dir: Path, encoder: Encoder | None, **overrides) -> HippoRAG:
    """The engine on ``save_dir`` with an LLM that must never be called (every passage has its
    OpenIE result), no progress bars and the recognition filter off."""
    kw = {"extractor": "openie", "show_progress": False, "use_filter": False, **overrides}
    return HippoRAG(save_dir, llm=ForbiddenLLM(), encoder=encoder, **kw)


def stats_diff(a: dict, b: dict, rel: float = 1e-9) -> list[str]:
    """Differences between two ``graph_stats()``: counts exactly, the total edge weight within
    ``rel`` (a float sum depends on the order of its terms)."""
    out = []
    for k in sorted(a.keys() | b.keys()):
        x, y = a.get(k), b.get(k)
        if isinstance(x, float) or isinstance(y, float):
            if x is None or y is None or abs(x - y) > rel * max(1.0, abs(x), abs(y)):
                out.append(f"graph_stats {k}: {x} vs {y}")
        elif x != y:
            out.append(f"graph_stats {k}: {x} vs {y}")
    return out


def load_line() -> str:
    """``load average 1/5/15 min`` of the machine (the figures move with it)."""
    from ..common import load_average
    return f"load average {load_average()}"


def write_reports(name: str, markdown: str, data: dict, out_dir: Path = RELIABILITY_DIR) -> tuple[Path, Path]:
    """``<out_dir>/<name>.md`` and ``<out_dir>/<name>.json``."""
    md = write_result(Path(out_dir) / f"{name}.md", markdown)
    # ASCII escapes: fuzz findings hold lone surrogates, which UTF-8 cannot encode
    js = write_result(Path(out_dir) / f"{name}.json", json.dumps(data, indent=1, ensure_ascii=True))
    return md, js


def journal_entry(path: Path, entry: dict) -> None:
    """Append ``entry`` to the journal ``path`` as one JSON line, on disk (fsync) before returning."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_journal(path: Path) -> tuple[set[int], dict | None, list[str]]:
    """(passages present after every finished operation, the unfinished one or None, child errors)."""
    present: set[int] = set()
    pending: dict | None = None
    errors: list[str] = []
    if not path.exists():
        return present, None, errors
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:           # a line cut by the kill: the op never started its work
            continue
        if "op" in e:
            pending = e
        elif pending is not None and e.get("id") == pending["id"]:
            if e.get("done"):
                batch = set(pending["docs"])
                present = present | batch if pending["op"] == "index" else present - batch
            else:
                errors.append(str(e.get("error")))
            pending = None
    return present, pending, errors


class Hung(BaseException):
    """A step of a reliability benchmark that got no answer within its deadline (a hung server).
    A ``BaseException``, so that the engine's own handlers of ``Exception`` let it through."""


@contextlib.contextmanager
def deadline(seconds: float, what: str):
    """Raise :class:`Hung` in the main thread where the block runs past ``seconds`` (``SIGALRM``;
    0: no deadline). A blocked socket read is interrupted by it, so a benchmark whose server stops
    answering reports that instead of waiting forever."""
    if not seconds:
        yield
        return

    def ring(signum, frame):
        raise Hung(f"{what}: no answer within {seconds:g} s")
    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def header(title: str, command: str) -> str:
    """The first lines of a report: title, command, commit and load."""
    from ..common import commit_label
    commit = commit_label(" (tracked files modified)")
    return f"# {title}\n\n    {command}\n\ncommit {commit}; {load_line()} at the end of the run\n"
