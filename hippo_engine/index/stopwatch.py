"""Per-stage timings in which every second is accounted for.

A :class:`Stopwatch` charges the time since its previous lap to the stage named at each lap, so
the stages tile the run: their sum is the total by construction, and time spent anywhere shows
up under some name instead of vanishing between two hand-placed timers.
"""
from __future__ import annotations

import time


class Stopwatch:
    """Consecutive laps: ``lap(stage)`` adds the time since the last lap (or the start) to
    ``stages[stage]``; ``report()`` gives the stages and their ``total``."""

    def __init__(self, start: float | None = None):
        self.start = time.perf_counter() if start is None else start
        self.last = self.start
        self.stages: dict[str, float] = {}

    def lap(self, stage: str) -> None:
        """Charge the time since the previous lap to ``stage``."""
        now = time.perf_counter()
        self.stages[stage] = self.stages.get(stage, 0.0) + (now - self.last)
        self.last = now

    def declare(self, *stages: str) -> None:
        """List ``stages`` in the report (at 0 s if never lapped)."""
        for s in stages:
            self.stages.setdefault(s, 0.0)

    def charge(self, stage: str, seconds: float) -> None:
        """Add ``seconds`` measured elsewhere, before this watch started, to ``stage`` (and to
        the total, by moving the start back)."""
        self.stages[stage] = self.stages.get(stage, 0.0) + seconds
        self.start -= seconds

    def report(self) -> dict[str, float]:
        """The stages in the order first lapped, then ``total`` (up to the last lap)."""
        return {**self.stages, "total": self.last - self.start}


__all__ = ["Stopwatch"]
