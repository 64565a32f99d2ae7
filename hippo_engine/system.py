"""Facts about the machine the engine runs on."""
from __future__ import annotations

import os


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; all CPUs where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)
