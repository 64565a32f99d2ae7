"""Leftovers of interrupted writes in an index folder.

Every file the engine writes into ``save_dir`` (``graph.npz``, the OpenIE and n-ary results
files) goes through :func:`hippo_engine.system.atomic_write`: a temp file ``.<name>.XXXXXXXX.tmp``
beside the target, fsynced, renamed over it. A process killed between the temp write and the
rename leaves the temp file behind. :func:`remove_orphan_temps` deletes such orphans; the index
calls it while it holds the writer lock. A temp file is an orphan only if nobody holds its
``flock`` (its writer takes one for as long as it writes; the kernel drops it when the writer
dies) and it is older than :data:`MIN_AGE_S` (covers the instant between its creation and the
lock), so a temp another live process is writing is never touched.
"""
from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

from hippo_engine.system import file_is_being_written

logger = logging.getLogger(__name__)

#: temp files younger than this are left alone whatever their lock says
MIN_AGE_S = 2.0

# ``.<name>.<8 mkstemp chars>.tmp`` (atomic_write) and ``graph.npz<8 chars>.tmp`` (older versions)
_TEMP = re.compile(r"^(\..+\.[A-Za-z0-9_]{8}|graph\.npz[A-Za-z0-9_]{8})\.tmp$")


def is_temp_name(name: str) -> bool:
    """True for the names of the temp files of our atomic writes."""
    return _TEMP.match(name) is not None


def remove_orphan_temps(folder: str | os.PathLike, min_age: float = MIN_AGE_S) -> list[Path]:
    """Delete the orphaned temp files of interrupted atomic writes in ``folder`` (not those a live
    writer holds, nor very recent ones); returns what was deleted. Errors are logged, not raised."""
    folder = Path(folder)
    try:
        names = [n for n in os.listdir(folder) if is_temp_name(n)]
    except OSError:
        return []
    now, gone = time.time(), []
    for name in names:
        p = folder / name
        try:
            if now - p.stat().st_mtime < min_age or file_is_being_written(p):
                continue
            p.unlink()
        except FileNotFoundError:
            continue
        except OSError as e:
            logger.warning("could not remove the stale temp file %s: %s", p, e)
            continue
        logger.info("removed %s, left by an interrupted write", p)
        gone.append(p)
    return gone
