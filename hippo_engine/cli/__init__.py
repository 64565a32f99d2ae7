"""The command line, ``hippo-engine`` (the console entry point ``hippo_engine.cli:main``; also
``python -m hippo_engine.cli``).

:mod:`.app` builds the parser and runs a command; one module per command group (:mod:`.documents`,
:mod:`.query`, :mod:`.explain`, :mod:`.mcp`, :mod:`.serve`) registers its parsers and runs its
commands; they share :mod:`.common` (the flags, their types, the engine of a command) and read files
with :mod:`.inputs`, print results with :mod:`.output`. A command module imports those three, never
:mod:`.app` nor another command."""
from __future__ import annotations

from hippo_engine.cli.app import build_parser, main
from hippo_engine.cli.inputs import read_corpus, read_documents, read_ids, read_queries

__all__ = ["build_parser", "main", "read_corpus", "read_documents", "read_ids", "read_queries"]
