"""Helpers shared by the reproduce commands (reproduce/common.py)."""
import hashlib

import pytest

from hippo_engine.llm.base import LLMError
from reproduce import common


def test_paths():
    assert (common.REPO_ROOT / "reproduce" / "common.py").is_file()
    assert common.RESULTS_DIR == common.REPO_ROOT / "reproduce" / "results"
    assert common.MUSIQUE_TRAIN_DIR.parts[-3:] == ("data", "musique", "hipporag_v1_train")


def test_memory_and_load():
    assert common.peak_rss_mb() >= common.rss_mb() > 1.0
    parts = common.load_average().split("/")
    assert len(parts) == 3 and all(float(x) >= 0 for x in parts)
    assert len(common.load_average(" ").split(" ")) == 3


def test_git_head():
    head = common.git_head()
    if head is not None:  # None outside a git checkout
        sha, dirty = head
        assert sha and isinstance(dirty, bool)


def test_file_sha256_and_write_result(tmp_path):
    path = common.write_result(tmp_path / "a" / "b" / "r.md", "héllo\n")
    assert path.read_text(encoding="utf-8") == "héllo\n"
    assert common.file_sha256(path) == hashlib.sha256("héllo\n".encode()).hexdigest()


def test_forbidden_llm_raises():
    before = common.ForbiddenLLM.calls
    with pytest.raises(LLMError):
        common.ForbiddenLLM().generate([{"role": "user", "content": "x"}])
    assert common.ForbiddenLLM.calls == before + 1
