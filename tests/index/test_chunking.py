"""Long documents become several passages by default (``chunk_size=1500`` tokens): cut at sentence,
line or word boundaries, each piece keeping its document's title line; short documents stay whole."""
import pytest
from fakes import NgramEncoder, NoCallLLM
from helpers import CORPUS, make_rag

from hippo_engine import HippoConfig, HippoRAG
from hippo_engine.index.chunking import TITLE_MAX_CHARS, chunk_text, document_chunks, split_title


class NoTokenizer:
    """A tokenizer that must not be called (a short text is whole by its length alone)."""

    def __call__(self, *a, **kw):
        raise AssertionError("tokenized a text that fits")


def words(n: int, start: int = 0) -> str:
    return " ".join(f"w{i}" for i in range(start, start + n))


def test_a_text_that_fits_is_whole_and_not_tokenized():
    assert chunk_text("Lake Veloria\nLies in the Orsk Highlands.", 1500, 0, NoTokenizer()) == \
        ["Lake Veloria\nLies in the Orsk Highlands."]
    assert chunk_text(words(10), 10) == [words(10)]
    assert document_chunks(words(5000), None) == [words(5000)]          # None: never cut (the paper)
    assert HippoConfig().chunk_size == 1500 and HippoConfig(chunk_size=None).chunk_size is None


def test_cuts_prefer_sentence_ends_and_line_breaks_in_the_second_half():
    text = "One two three four. Five six seven eight nine ten eleven twelve"
    assert chunk_text(text, 6) == ["One two three four.", "Five six seven eight nine ten", "eleven twelve"]
    text = "a b c d\ne f g h i j"
    assert chunk_text(text, 6) == ["a b c d", "e f g h i j"]
    # a sentence end in the first half does not make a short piece: the window is filled
    assert chunk_text("A. b c d e f g h", 6) == ["A. b c d e f", "g h"]


def test_pieces_are_substrings_covering_every_word_in_order_and_overlap_repeats_words():
    text = " ".join(f"Sentence {i} has words." for i in range(300))
    pieces = chunk_text(text, 40)
    assert all(p in text for p in pieces) and all(len(p.split()) <= 40 for p in pieces)
    assert " ".join(pieces).split() == text.split()
    overlapped = chunk_text(text, 40, overlap=8)
    assert all(len(p.split()) <= 40 for p in overlapped) and len(overlapped) > len(pieces)
    for a, b in zip(overlapped, overlapped[1:], strict=False):
        assert a.split()[-8:] == b.split()[:8]
    with pytest.raises(ValueError):
        chunk_text(text, 10, overlap=10)


class CharTokenizer:
    """One token per character, with offsets, as a fast tokenizer returns them."""

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=True, verbose=False):
        return {"offset_mapping": [(i, i + 1) for i, c in enumerate(text) if not c.isspace()]}


def test_with_a_tokenizer_tokens_are_counted_and_words_are_not_split():
    text = "alpha beta gamma delta"        # 19 tokens (characters) in 4 words
    assert chunk_text(text, 12, 0, CharTokenizer()) == ["alpha beta", "gamma delta"]
    assert chunk_text("x" * 25, 10, 0, CharTokenizer()) == ["x" * 10, "x" * 10, "x" * 5]  # no gap: hard cuts


def test_every_piece_keeps_the_document_title():
    doc = "The Glass Orchard\n" + " ".join(f"Fact number {i} is here." for i in range(100))
    pieces = document_chunks(doc, 50)
    assert len(pieces) > 5 and all(p.startswith("The Glass Orchard\nFact number ") for p in pieces)
    assert " ".join(p.split("\n", 1)[1] for p in pieces).split() == doc.split("\n", 1)[1].split()
    long_first_line = "x " * TITLE_MAX_CHARS + "\n" + words(200)
    assert split_title(long_first_line) == (None, long_first_line)
    assert document_chunks(long_first_line, 50) == chunk_text(long_first_line, 50)     # no title to repeat
    assert split_title("Only a title\n  ") == (None, "Only a title\n  ")
    assert split_title("T\nbody") == ("T", "body")


def test_the_default_cuts_a_long_document_into_passages_of_one_document(tmp_path):
    """Through the facade (fakes: words as tokens): 4,050 words become 3 passages of the same
    document, each with its title; retrieval returns a passage, not the whole document."""
    rag = make_rag(tmp_path, use_filter=False)
    long_doc = "Lake Book\n" + " ".join(f"Ilse Marrow saw Lake Veloria on day {i}." for i in range(450))
    rag.index([long_doc, *CORPUS[1:3]], ids=["book", "marrow", "velor"])
    stored = rag.index_state.stored_documents(["book"])[0]["book"]
    assert len(stored) == 3 and len(rag.index_state) == 5
    (sol,) = rag.retrieve(["Who saw Lake Veloria?"], num_to_retrieve=5)
    book = [d for d in sol.docs if d.startswith("Lake Book\n")]
    assert book and all(len(d.split()) <= 1502 for d in book)
    assert all(ids == ["book"] for d, ids in zip(sol.docs, sol.doc_ids, strict=True) if d in book)
    rag.delete(docs=[long_doc])                          # by text: the same cut finds the same passages
    assert len(rag.index_state) == 2


def test_short_documents_do_not_load_the_encoder(tmp_path):
    rag = HippoRAG(tmp_path, extractor="openie", llm=NoCallLLM(), show_progress=False)
    batch = rag._split(CORPUS, None, "index")
    assert len(batch.passages) == len(CORPUS) and rag.models.encoder_model is None
    rag.close()
    rag = HippoRAG(tmp_path / "small", llm=NoCallLLM(), encoder=NgramEncoder(), chunk_size=5, show_progress=False)
    assert len(rag._split([CORPUS[0]], None, "index").passages) == 3      # 13 words after the title
    rag.close()


@pytest.mark.slow
def test_the_encoders_tokenizer_counts_the_tokens(tmp_path):
    """On the real all-MiniLM-L6-v2 tokenizer: a long document's passages hold at most ``chunk_size``
    word pieces besides the title line, and end at sentence ends."""
    rag = HippoRAG(tmp_path, extractor="ner", llm=NoCallLLM(), show_progress=False, chunk_size=256)
    tok = rag.encoder.tokenizer
    doc = "Vellmar Observatory\n" + " ".join(
        f"In {1800 + i} the observatory's astronomers catalogued comet C/{i} near Mount Caldis." for i in range(200))
    batch = rag._split([doc], None, "index")
    pieces = list(batch.passages.values())
    assert len(pieces) > 10
    for p in pieces:
        title, body = p.split("\n", 1)
        assert title == "Vellmar Observatory" and body.endswith(".")
        assert len(tok(body, add_special_tokens=False)["input_ids"]) <= 256
    rag.close()
