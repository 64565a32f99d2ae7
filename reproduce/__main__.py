"""``python -m reproduce COMMAND ...``: see :mod:`reproduce.cli` (``python -m reproduce --help``)."""
from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    try:
        result = main()
    except KeyboardInterrupt:  # per-question results already saved stay cached
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else 0)
