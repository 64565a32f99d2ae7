"""``python -m reproduce TABLE --dataset DIR_OR_NAME``: see :mod:`reproduce.tables`."""
from __future__ import annotations

import sys

from .tables import main

if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # per-question results already saved stay cached
        sys.exit(130)
