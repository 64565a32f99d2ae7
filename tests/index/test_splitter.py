"""``DocumentSplitter``: the document -> passages step as one object of ``index/`` (the facade's
``_split`` hands it the configuration and its models' encoder provider)."""
import pytest
from fakes import NgramEncoder, NoCallLLM
from helpers import CORPUS

from hippo_engine import HippoRAG
from hippo_engine.config import IndexConfig, StorageConfig
from hippo_engine.index.documents import DocumentSplitter


def test_the_splitter_gives_the_facades_batch_and_asks_for_the_encoder_only_for_long_documents(tmp_path):
    rag = HippoRAG(tmp_path, llm=NoCallLLM(), encoder=NgramEncoder(), chunk_size=5, show_progress=False)
    asked = []

    def encoder():
        asked.append(1)
        return rag.models.encoder()

    splitter = DocumentSplitter.of(rag.config.index, rag.config.storage, encoder)
    got, want = splitter.split(CORPUS, None, "index"), rag._split(CORPUS, None, "index")
    assert (got.passages, got.documents, got.positions, got.skipped) == \
        (want.passages, want.documents, want.positions, want.skipped)
    assert len(got.passages) > len(CORPUS) and asked == [1]
    rag.close()
    short = DocumentSplitter.of(IndexConfig(), StorageConfig(), lambda: pytest.fail("loaded the encoder"))
    assert len(short.split(CORPUS, [f"d{i}" for i in range(len(CORPUS))], "index").documents) == len(CORPUS)


def test_the_backend_decides_about_nul_characters():
    assert not DocumentSplitter.of(IndexConfig(), StorageConfig(), lambda: None).no_nul
    pg = DocumentSplitter.of(IndexConfig(), StorageConfig(storage_backend="postgres"), lambda: None)
    with pytest.raises(ValueError, match="NUL"):
        pg.split(["a\x00b"], None, "index")
