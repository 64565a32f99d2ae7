"""Long work made visible: one-line announcements of expensive steps and a bar while a model loads.

Announcements go to the ``hippo_engine.progress`` logger at INFO level, so a library user sees them
once logging is configured, and the command line prints them on stderr unless ``--quiet``. They say
what is about to cost time or money before it starts (how many LLM calls, which model).
Loops show ``tqdm`` bars where they run (encoding, LLM batches, spaCy), switched by the
``show_progress`` setting. Components receive that setting as one :class:`Progress` object (made
once from the configuration by ``Progress.of``; ``QUIET`` when none is given) and ask it for bars,
loading bars and announcements.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import tqdm.auto as tqdm_auto  # its ``tqdm`` looked up when a bar is made (a test may stand in its own)

PROGRESS_LOGGER = "hippo_engine.progress"
logger = logging.getLogger(PROGRESS_LOGGER)


def announce(message: str) -> None:
    """Say what expensive step starts now (INFO on the ``hippo_engine.progress`` logger)."""
    logger.info(message)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``"1 call"``, ``"3 calls"``."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


@contextmanager
def loading(what: str, show: bool) -> Iterator[None]:
    """A one-step bar (``Loading <what>``, with the elapsed time) while a model loads, and an
    announcement; nothing on screen when ``show`` is False."""
    announce(f"loading {what}")
    bar = tqdm_auto.tqdm(total=1, desc=f"Loading {what}", disable=not show, bar_format="{desc}: {elapsed}")
    restore = _silence_transformers() if not show else None
    t0 = time.perf_counter()
    try:
        yield
        bar.update(1)
    finally:
        bar.close()
        if restore is not None:
            restore()
    logger.debug("loaded %s in %.1fs", what, time.perf_counter() - t0)


def _silence_transformers():
    """Switch off ``transformers``' own bars ("Loading weights") while a quiet load runs; returns
    how to switch them back (None when ``transformers`` is not installed)."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    if not hf_logging.is_progress_bar_enabled():
        return None
    hf_logging.disable_progress_bar()
    return hf_logging.enable_progress_bar


class ShowsProgress(Protocol):
    """Anything with a ``show_progress`` setting (a configuration, an LLM client)."""

    show_progress: bool


@dataclass(frozen=True)
class Progress:
    """Whether long work shows bars (``show``), handed to components as one object: ``bar`` wraps a
    loop in a ``tqdm`` bar (disabled when not shown), ``loading`` is the bar while a model loads,
    ``announce`` says what expensive step starts (always logged, shown or not)."""

    show: bool = False

    @classmethod
    def of(cls, config: ShowsProgress) -> Progress:
        """The progress of a configuration (its ``show_progress``)."""
        return SHOWN if config.show_progress else QUIET

    def when(self, condition: bool) -> Progress:
        """This progress, quiet unless ``condition`` holds (e.g. a bar only for batches of 2+)."""
        return self if condition else QUIET

    def bar(self, iterable: Iterable | None = None, *, total: float | None = None, desc: str | None = None,
            disable: bool = False, **tqdm_kwargs: Any) -> Any:
        """A ``tqdm`` bar over ``iterable`` (or updated by hand up to ``total``); nothing on screen
        when not shown or when ``disable``."""
        return tqdm_auto.tqdm(iterable, total=total, desc=desc, disable=disable or not self.show, **tqdm_kwargs)

    def loading(self, what: str) -> AbstractContextManager[None]:
        """The bar and announcement while ``what`` loads (see :func:`loading`)."""
        return loading(what, self.show)

    @staticmethod
    def announce(message: str) -> None:
        """Say what expensive step starts now (see :func:`announce`)."""
        announce(message)


#: no bars (announcements are still logged)
QUIET = Progress(False)
#: bars shown
SHOWN = Progress(True)


@contextmanager
def cli_handler(quiet: bool) -> Iterator[None]:
    """Within the block, announcements go to stderr as plain lines (the command line's view), or
    nowhere when ``quiet``; the logger is restored afterwards."""
    log = logging.getLogger(PROGRESS_LOGGER)
    saved = (list(log.handlers), log.propagate, log.level)
    log.handlers.clear()
    log.propagate = False
    if quiet:
        log.addHandler(logging.NullHandler())
    else:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("hippo-engine: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    try:
        yield
    finally:
        log.handlers[:], log.propagate, log.level = saved


__all__ = ["PROGRESS_LOGGER", "QUIET", "SHOWN", "Progress", "ShowsProgress", "announce", "cli_handler", "loading",
           "plural"]
