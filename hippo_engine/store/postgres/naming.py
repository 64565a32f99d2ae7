"""The default names of an index's PostgreSQL schema (:func:`default_schema`), and the old default
of indexes made before identities existed (:func:`legacy_schema`). Plain text: no driver needed."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from hippo_engine.store.identity import folder_key


def legacy_schema(save_dir: Path) -> str:
    """The default schema on a shared server before indexes had identities: ``hippo_<save_dir
    name>`` (lowercase, letters, digits and ``_``), which two folders of one name shared."""
    return ("hippo_" + _name_part(save_dir))[:63]


def _name_part(save_dir: Path) -> str:
    return re.sub(r"[^a-z0-9_]+", "_", Path(save_dir).resolve().name.lower()).strip("_") or "index"


def default_schema(save_dir: Path, embedded: bool) -> str:
    """``hippo`` on an embedded server (one index per server); on a shared server
    ``hippo_<save_dir name>_<8 hex digits of the resolved path's SHA-256>``, unique per folder."""
    if embedded:
        return "hippo"
    digest = hashlib.sha256(folder_key(save_dir).encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"hippo_{_name_part(save_dir)[:47]}_{digest}"


__all__ = ["default_schema", "legacy_schema"]
