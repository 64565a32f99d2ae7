"""``ResultsFile``: an LLM extractor's results file (OpenIE triples, n-ary facts) in ``save_dir``.

Extraction runs before the index's writer lock is taken (it is the slow, LLM-bound part), so two
processes indexing into one folder may both extract and save. Each save therefore happens under
the file's own lock (``<file>.lock``) and first merges what another process saved since this one
last read the file: no process's paid-for results are lost. The file is read lazily, so a damaged
file does not stop an index from being opened to query or delete; reading it then raises an error
naming it.
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Generic, TypeVar

from filelock import FileLock

logger = logging.getLogger(__name__)

R = TypeVar("R")


def safe_name(name: str) -> str:
    """A model name usable in a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


class ResultsFile(Generic[R]):
    """Results by passage id, kept in ``path`` with ``load(path) -> {id: result}`` and
    ``save(path, results)`` (an atomic write). ``what`` names the file in errors."""

    def __init__(self, path: Path, load: Callable[[Path], dict[str, R]],
                 save: Callable[[Path, Iterable[R]], None], what: str):
        self.path = Path(path)
        self._load, self._save, self.what = load, save, what
        self._results: dict[str, R] | None = None
        self._stamp: tuple[int, int] | None = None     # (mtime_ns, size) of the file as last read or written
        self._lock = FileLock(str(self.path) + ".lock")

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    def _read(self) -> dict[str, R]:
        stamp = self._file_stamp()
        if stamp is None:
            return {}
        try:
            out = self._load(self.path)
        except UnicodeDecodeError as e:
            raise ValueError(f"{self.what} {self.path} is not UTF-8 text ({e}); fix or delete it "
                             f"(its passages are then extracted again)") from None
        self._stamp = stamp
        return out

    @property
    def results(self) -> dict[str, R]:
        """The results, read on first use."""
        if self._results is None:
            self._results = self._read()
        return self._results

    def refresh(self) -> int:
        """Add the results another process saved since our last read (a cheap ``stat`` when
        nothing changed); returns how many were added."""
        results = self.results
        if self._file_stamp() == self._stamp:
            return 0
        theirs = self._read()
        added = [k for k in theirs if k not in results]
        for k in added:
            results[k] = theirs[k]
        if added:
            logger.info("%s %s: %d result(s) saved by another process", self.what, self.path, len(added))
        return len(added)

    def save(self) -> None:
        """Write the results, first adding those another process saved since our last read."""
        with self._lock:
            self.refresh()
            self._save(self.path, self.results.values())
            self._stamp = self._file_stamp()


__all__ = ["ResultsFile"]
