"""The command line's application: ``hippo-engine {index,delete,stats,retrieve,qa,explain,export,mcp,serve,demo}``.

This module builds the top-level parser, registers each command group's parsers and runs a command,
turning library errors into a message and exit status 2. The commands live beside it:
:mod:`.documents` (index, delete, stats, demo), :mod:`.query` (retrieve, qa), :mod:`.explain`,
:mod:`.export`, :mod:`.mcp`, :mod:`.serve`; the flags and helpers they share are in :mod:`.common`, files are read by
:mod:`.inputs`, results printed by :mod:`.output`."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from hippo_engine import __version__
from hippo_engine.cli import common, documents, explain, export, mcp, query, serve
from hippo_engine.config import ConfigError
from hippo_engine.progress import cli_handler


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``hippo-engine``."""
    p = argparse.ArgumentParser(prog="hippo-engine", description=(
        "HippoRAG 2-style long-term memory: index documents into a passage-entity graph, retrieve "
        "with Personalized PageRank, answer with an LLM. Runs offline with packaged default models."))
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details (INFO level)")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    documents.add_parsers(sub)
    query.add_parsers(sub)
    explain.add_parser(sub)
    export.add_parser(sub)
    mcp.add_parser(sub)
    serve.add_parser(sub)
    return p


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line's arguments; an option or argument the command does not take is a usage
    error of that command (its own usage, exit 2), naming the closest option it does take."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = _subcommand(parser, args.command)
        command.error(unknown_arguments(command, extra))
    return args


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of the subcommand ``name`` (the top-level parser if none has that name)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    return parser


def unknown_arguments(command: argparse.ArgumentParser, extra: Sequence[str]) -> str:
    """``extra`` (what ``command`` did not take) in words, with the closest option it does take."""
    import difflib
    options = [o for o in extra if o.startswith("-") and len(o) > 1]
    if not options:
        return f"unexpected argument(s): {' '.join(extra)}"
    known = [o for a in command._actions for o in a.option_strings]
    parts = []
    for o in options:
        close = difflib.get_close_matches(o.split("=", 1)[0], known, n=1, cutoff=0.8)
        parts.append(f"{o} (did you mean {close[0]}?)" if close else o)
    hint = f"; see `{command.prog} -h` for the options it takes"
    return f"{'unknown option' if len(parts) == 1 else 'unknown options'} {', '.join(parts)}{hint}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 on a usage or input error)."""
    args = parse(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    finally:
        common.close_opened()


def _run(args) -> int:
    try:
        with cli_handler(quiet=getattr(args, "quiet", False)):
            return args.func(args)
    except BrokenPipeError as e:   # the reader of our output is gone (`| head`, or Ctrl-C also ended `| tee`)
        _silence_output()
        return 130 if _caused_by_interrupt(e) else 141
    except (OSError, ValueError, TypeError, ConfigError, RuntimeError) as e:   # library errors say what and where
        _say(f"hippo-engine: error: {e}")
        return 2
    except KeyboardInterrupt:
        _say("hippo-engine: interrupted (an index is left as it was before the interrupted write)")
        return 130


def _say(message: str) -> None:
    """Print to stderr; a pipe whose reader is gone is not an error of its own."""
    try:
        print(message, file=sys.stderr, flush=True)
    except BrokenPipeError:
        _silence_output()


def _silence_output() -> None:
    """Point stdout and stderr at /dev/null, so that the interpreter's own flush at exit does not
    fail again on the broken pipe (Python's documented way out of SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(devnull, stream.fileno())
        except (OSError, ValueError):
            pass


def _caused_by_interrupt(e: BaseException | None) -> bool:
    """Whether a Ctrl-C is in ``e``'s chain (a progress bar closing on a dead pipe while the
    interrupt unwinds raises a BrokenPipeError in its place)."""
    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, KeyboardInterrupt):
            return True
        e, seen = e.__context__, seen + 1
    return False


__all__ = ["build_parser", "main", "parse", "unknown_arguments"]
