"""``hippo-engine export``: copy an index to a new folder or another storage backend, without
extracting or encoding anything again (:mod:`hippo_engine.export`).

The source is ``--save-dir`` (found on whatever storage its folder recorded; ``--dsn`` for an index on a
PostgreSQL server); the destination is a new folder, on the storage ``--to`` names: ``sqlite`` (the
default), a backend's name (an embedded server in the destination folder), or a server's URL
(``postgresql://...``; ``falkordb://...`` where that backend is installed)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hippo_engine.cli import common

#: URL schemes of ``--to``: the backend they name and the setting that takes the URL
URL_SCHEMES = {"postgresql": ("postgres", "postgres_dsn"), "postgres": ("postgres", "postgres_dsn"),
               "falkordb": ("falkordb", "falkordb_server")}


def destination_settings(to: str | None, schema: str | None = None) -> dict[str, Any]:
    """``HippoConfig`` settings of the destination ``--to`` names: a backend name or a server URL."""
    if to is None or to == "":
        return {"storage_backend": "sqlite"}
    scheme = urlsplit(to).scheme if "://" in to else None
    if scheme is None:
        settings: dict[str, Any] = {"storage_backend": to}
    elif scheme in URL_SCHEMES:
        backend, field = URL_SCHEMES[scheme]
        settings = {"storage_backend": backend, field: to}
    else:
        raise ValueError(f"export: --to takes a storage backend's name or a server URL "
                         f"({', '.join(s + '://' for s in URL_SCHEMES)}); got a {scheme}:// URL")
    if schema is not None:
        if settings["storage_backend"] != "postgres":
            raise ValueError("export: --to-schema names a PostgreSQL schema; give it with --to postgres or a "
                             "postgresql:// URL")
        settings["postgres_schema"] = schema
    return settings


def cmd_export(args) -> int:
    """Copy the index of ``--save-dir`` into the new index ``dest``."""
    from hippo_engine.config import HippoConfig
    from hippo_engine.export import export_index
    from hippo_engine.progress import Progress

    common.existing_index(args)
    show = not args.quiet
    source = HippoConfig(**{**common.engine_overrides(args), "show_progress": False})
    dest = HippoConfig(show_progress=show, **destination_settings(args.to, args.to_schema))
    report = export_index(Path(args.save_dir), Path(args.dest), dest, source_config=source, progress=Progress(show))
    counts = report.counts
    print(f"exported {counts.get('passage_vectors', 0)} passages, {counts.get('entity_vectors', 0)} entities, "
          f"{counts.get('fact_vectors', 0)} facts and {counts.get('documents', 0)} documents to {args.dest} "
          f"({report.backend}: {report.destination}); nothing was extracted or encoded again")
    print(json.dumps(report.to_dict(), indent=2))
    return 0


def add_parser(sub: Any) -> None:
    """Register ``export``."""
    sp = sub.add_parser("export", help="copy an index to a new folder or another storage backend, without "
                                       "extracting or encoding again")
    sp.add_argument("dest", metavar="DEST", help="the new index's folder (must not hold an index; it may be an "
                                                 "empty folder)")
    sp.add_argument("--to", default=None, metavar="STORAGE",
                    help="the destination's storage: sqlite (the default), postgres (an embedded server in DEST), "
                         "a PostgreSQL URL (postgresql://user@host:port/db), or another registered backend's "
                         "name or URL (falkordb, falkordb://host:port/graph, with the falkordb extra)")
    sp.add_argument("--to-schema", default=None, metavar="NAME",
                    help="the PostgreSQL schema of the destination (default: one named after DEST)")
    common.shared_flags(sp, llm=False)
    sp.set_defaults(func=cmd_export)


__all__ = ["URL_SCHEMES", "add_parser", "cmd_export", "destination_settings"]
