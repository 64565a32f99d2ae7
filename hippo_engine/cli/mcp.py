"""``hippo-engine mcp``: the memory of an index folder served to MCP clients (agents) over stdio.

The tools (remember, recall, answer, forget, memory_stats) are those of
:func:`hippo_engine.service.mcp_server.build_mcp`. The command takes the other commands' storage, LLM
and ranking flags. stdout carries only the protocol: while the index opens, anything written to
stdout goes to stderr, and the SDK's stdio transport diverts stray output the same way while it
serves; progress bars are off, announcements and logs go to stderr. Light to import (the server and
the engine load when the command runs).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hippo_engine.cli import common
from hippo_engine.service.settings import ServiceSettings  # light: a dataclass

#: how long remember waits for indexing (the tool's default; --wait changes it)
DEFAULT_WAIT_S = 45.0
#: the most texts (ids) in one call by default: the HTTP API's
DEFAULT_MAX_BATCH = ServiceSettings.max_batch


def add_parser(sub) -> None:
    """Register ``mcp``."""
    sp: argparse.ArgumentParser = sub.add_parser(
        "mcp", help="serve the memory to MCP clients (agents) over stdio: remember, recall, answer, forget, "
                    "memory_stats",
        description="Serve an index folder as long-term memory to an MCP client over stdio (the client starts "
                    "this command). The index is created on first use.")
    sp.add_argument("--workspace", default=None, help="serve this named workspace of --save-dir (created if "
                    "missing) instead of the folder's own index")
    sp.add_argument("--wait", type=common.positive_float, default=DEFAULT_WAIT_S, metavar="SECONDS",
                    help=f"longest time remember waits for its documents to be indexed (default {DEFAULT_WAIT_S:g})")
    sp.add_argument("--max-batch", type=common.positive, default=DEFAULT_MAX_BATCH, metavar="N",
                    help=f"most texts per remember and ids per forget (default {DEFAULT_MAX_BATCH}, as serve's "
                         "--max-batch; more: a tool error). The other limits are serve's defaults: "
                         f"{_limits_line()}")
    common.ranking_flags(sp)
    common.shared_flags(sp, creates=True)
    sp.set_defaults(func=cmd_mcp)


def _limits_line() -> str:
    d = ServiceSettings
    return (f"a text at most {d.max_text_chars:,} characters, a query or question at most {d.max_query_chars:,}, "
            f"top_k at most {d.max_top_k}")


def limits(args) -> Any:
    """The tools' limits (:class:`hippo_engine.service.limits.Limits`): the HTTP API's defaults, with
    ``--max-batch``."""
    from hippo_engine.service.limits import Limits
    return Limits(max_batch=args.max_batch)


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send whatever is written to stdout (by Python or by native code) to stderr meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def cmd_mcp(args) -> int:
    """Open the memory (so a bad folder or server fails now, on stderr), then serve until stdin closes."""
    try:
        from hippo_engine.service.mcp_server import build_mcp
        from hippo_engine.service.workspaces import Workspaces
    except ImportError as e:
        raise RuntimeError(f"the MCP server needs the server extra: pip install 'hippo-engine[server]' ({e})") from e
    with stdout_to_stderr():
        workspaces = Workspaces(Path(args.save_dir), rag_options=common.rag_options(args), memory_options={})
    try:
        with stdout_to_stderr():
            workspaces.get(args.workspace, create=True)
        build_mcp(workspaces, args.workspace, wait_s=args.wait, limits=limits(args)).run("stdio")
    finally:
        with stdout_to_stderr():
            workspaces.close()
    return 0
