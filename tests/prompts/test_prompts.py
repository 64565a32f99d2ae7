"""The prompt-file loader."""
import pytest

from hippo_engine.prompts import available_prompts, load_json_prompt, load_prompt, prompt_path, prompts_dir


def test_prompts_ship_inside_the_package():
    import hippo_engine.prompts as pkg

    d = prompts_dir()
    assert d.is_absolute() and d.is_dir()
    assert pkg.__name__ == "hippo_engine.prompts"
    for name in ("openie_ner.json", "openie_triples.json", "qa_system.txt", "filter_program.json"):
        assert (d / name).is_file(), name


def test_load_prompt_reads_file():
    text = load_prompt("qa_system.txt")
    assert "Answer:" in text
    assert "qa_system.txt" in available_prompts()
    assert prompt_path("qa_system.txt") == prompts_dir() / "qa_system.txt"


def test_load_json_prompt():
    data = load_json_prompt("qa_example.json")
    assert data["examples"][0]["response"].rstrip().splitlines()[-1].startswith("Answer:")


def test_missing_prompt_lists_available_files():
    with pytest.raises(FileNotFoundError) as e:
        load_prompt("no_such_prompt.txt")
    assert "no_such_prompt.txt" in str(e.value)
    assert "qa_system.txt" in str(e.value)


@pytest.mark.parametrize("name", ["../pyproject.toml", "/etc/hostname"])
def test_names_outside_prompts_dir_are_refused(name):
    with pytest.raises(ValueError):
        load_prompt(name)
