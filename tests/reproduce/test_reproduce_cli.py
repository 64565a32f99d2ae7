"""The one entry point, ``python -m reproduce COMMAND`` (reproduce/cli.py, reproduce/__main__.py)."""
import subprocess
import sys
from pathlib import Path

import pytest

from reproduce.cli import COMMANDS, HELP, build_parser
from reproduce.tables.cli import TABLES

REPO = Path(__file__).resolve().parents[2]


def test_every_command_has_a_subcommand_and_a_help_line():
    names = set(TABLES) | set(COMMANDS)
    assert names == set(HELP)
    assert {"table-recall", "table-ablations", "table-weights", "table-qa", "table-graph", "bench",
            "bench-musique", "check-index", "communities", "build-filter-demos", "rankings", "explain",
            "citations", "web-screenshot", "table-recall-llm-free", "table-modes", "ppr-scale", "ppr-musique",
            "ranking-prefix", "reader-choice"} == names
    text = build_parser().format_help()
    for name in names:
        assert name in text
        sub = build_parser().parse_args(_minimal_args(name))
        assert sub.command == name


def _minimal_args(name):
    return [name, "--dataset", "x"] if name in TABLES else [name]


@pytest.mark.parametrize("name", ["table-recall", "bench", "bench-musique", "check-index", "communities",
                                  "build-filter-demos", "rankings", "ranking-prefix"])
def test_command_help_explains_it(name, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([name, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert f"python -m reproduce {name}" in out and len(out.splitlines()) > 8


def test_no_command_is_an_error_and_module_entry_point_works():
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([])
    assert e.value.code == 2
    out = subprocess.run([sys.executable, "-m", "reproduce", "--help"], cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0 and "table-recall" in out.stdout and "bench-musique" in out.stdout


def test_table_weights_option_is_validated():
    args = build_parser().parse_args(["table-weights", "--dataset", "x", "--weights", "0.1,0.2"])
    assert args.weights == [0.1, 0.2]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["table-weights", "--dataset", "x", "--weights", "2"])
