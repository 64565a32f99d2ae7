"""Long work is announced before it starts (LLM calls counted) and bars follow show_progress."""
from __future__ import annotations

import logging

from helpers import CORPUS, make_rag

from hippo_engine.progress import PROGRESS_LOGGER, cli_handler, loading, plural


def test_loading_bar_and_announcement(capsys, caplog):
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        with loading("test model", show=True):
            pass
        with loading("quiet model", show=False):
            pass
    err = capsys.readouterr().err
    assert "Loading test model" in err and "quiet model" not in err
    assert "loading test model" in caplog.text and "loading quiet model" in caplog.text
    assert plural(1, "call") == "1 call" and plural(3, "query", "queries") == "3 queries"


def test_index_retrieve_and_qa_announce_their_llm_calls(tmp_path, caplog):
    rag = make_rag(tmp_path / "idx")
    with caplog.at_level(logging.INFO, logger=PROGRESS_LOGGER):
        rag.index(CORPUS[:3])
        rag.index(CORPUS[:4])                  # three already indexed: one new passage
        rag.rag_qa(["Where was Ilse Marrow born?", "Who founded Tamsin College?"])
    lines = [r.getMessage() for r in caplog.records if r.name == PROGRESS_LOGGER]
    assert "3 new passages: 3 without stored results go to the LLM 'scripted' for openie fact extraction" in lines
    assert "1 new passage: 1 without stored results go to the LLM 'scripted' for openie fact extraction" in lines
    assert any(line.startswith("indexing 3 passage(s): ") and "new facts to embed" in line for line in lines)
    assert "recognition filter: up to 2 LLM calls ('scripted')" in lines
    assert "reader: 2 LLM calls ('scripted', top 5 passages each)" in lines


def test_cli_handler_prints_plain_lines_or_nothing_and_restores(capsys):
    log = logging.getLogger(PROGRESS_LOGGER)
    before = (list(log.handlers), log.propagate, log.level)
    with cli_handler(quiet=False):
        log.info("reader: 3 LLM calls")
    assert capsys.readouterr().err == "hippo-engine: reader: 3 LLM calls\n"
    with cli_handler(quiet=True):
        log.info("reader: 3 LLM calls")
    assert capsys.readouterr().err == ""
    assert (list(log.handlers), log.propagate, log.level) == before


def test_a_quiet_load_also_silences_transformers_bars():
    from transformers.utils import logging as hf_logging
    assert hf_logging.is_progress_bar_enabled()
    with loading("quiet model", show=False):
        assert not hf_logging.is_progress_bar_enabled()      # no "Loading weights" bar under --quiet
    assert hf_logging.is_progress_bar_enabled()
    with loading("shown model", show=True):
        assert hf_logging.is_progress_bar_enabled()
