"""``python -m hippo_engine.cli``: the ``hippo-engine`` command."""
from __future__ import annotations

import sys

from hippo_engine.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
