"""One error style at the command line (issue 39, item 6): an option a command does not take is a usage
error of that command (its own usage, exit 2, the closest option it does take), and an empty question is
said in a reader's words, naming which one (``-q``, a questions file's item), before any index is opened."""
import json
import subprocess
import sys

import pytest

from hippo_engine.cli import main

COMMANDS = [["index", "corpus.json"], ["delete", "--ids", "a"], ["stats"], ["retrieve", "-q", "x"], ["qa", "-q", "x"],
            ["explain", "-q", "x"], ["mcp"], ["serve"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_unknown_option_prints_the_commands_own_usage(command, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([*command, "--save-dir", str(tmp_path / "idx"), "--topk", "3"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith(f"usage: hippo-engine {command[0]} "), err[:200]
    assert f"hippo-engine {command[0]}: error: unknown option --topk" in err
    assert f"see `hippo-engine {command[0]} -h` for the options it takes" in err
    assert not (tmp_path / "idx").exists()                       # nothing was opened or made


def test_the_closest_option_is_named_and_a_stray_argument_is_said():
    r = subprocess.run([sys.executable, "-m", "hippo_engine.cli", "retrieve", "--save-dir", "x", "-q", "a",
                        "--topk", "3", "--llm-timout", "2"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("usage: hippo-engine retrieve ")
    assert "unknown options --topk (did you mean --top-k?), --llm-timout (did you mean --llm-timeout?)" in r.stderr
    r = subprocess.run([sys.executable, "-m", "hippo_engine.cli", "stats", "--save-dir", "x", "extra"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "hippo-engine stats: error: unexpected argument(s): extra" in r.stderr


@pytest.mark.parametrize("argv,message", [
    (["retrieve", "-q", ""], "hippo-engine retrieve: error: question 1 (-q '') is empty; give the question's text"),
    (["qa", "-q", "ok", "--query", "  "], "hippo-engine qa: error: question 2 (--query '  ') is empty"),
    (["explain", "-q", " "], "hippo-engine explain: error: argument -q/--query: the question (' ') is empty"),
])
def test_an_empty_question_is_a_usage_error_naming_it(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--save-dir", str(tmp_path / "idx")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and f"usage: hippo-engine {argv[0]} " in err
    assert "non-empty strings" not in err and "items [" not in err


@pytest.mark.parametrize("items,where", [(["ok", " "], "item 1"), ([{"question": ""}], "item 0")])
def test_an_empty_question_in_a_file_names_the_file_and_item(items, where, tmp_path, capsys):
    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps(items))
    assert main(["retrieve", "--queries", str(qfile), "--save-dir", str(tmp_path / "idx")]) == 2
    assert f"hippo-engine: error: {qfile}: {where}: the question is empty" in capsys.readouterr().err
