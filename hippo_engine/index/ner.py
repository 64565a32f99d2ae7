"""LLM-free facts: spaCy NER and sentence segmentation turn a passage into hyperedges.

Each sentence of a passage becomes a fact (a :class:`~hippo_engine.datatypes.Hyperedge`) linked to
every named entity it mentions; the fact store embeds the sentence, so fact scoring, entity
seeding, passage seeds and PPR work as in the OpenIE path. Numeric entity types (cardinals,
ordinals, quantities, percentages, money) are left out: they are not things a question is
about, and they would join unrelated passages through shared numbers. Dates are kept.

A ``"title\\ntext"`` passage (the format of every benchmark and of the CLI's ``{title, text}``
records) names its topic on the first line. The title is added as an entity of each of the
passage's sentences: it stands in for the coreference an LLM resolves ("She was born in ...")
and links the passage to every question about its topic. A first line longer than
``TITLE_MAX_WORDS`` words is taken for text, not a title, and so is a first line that runs on into
the second (hard-wrapped text, :func:`continues`).

Hard-wrapped text (lines wrapped at 70-80 columns) is parsed with its line breaks inside sentences
made spaces (:func:`~hippo_engine.index.linebreaks.join_wrapped_lines`): every remaining line break is
a sentence boundary, so without this a fact would end wherever a line did.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence

from hippo_engine.datatypes import Hyperedge
from hippo_engine.index.linebreaks import first_break_is_soft, join_wrapped_lines
from hippo_engine.models.spacy_ner import SENTENCE_COMPONENTS
from hippo_engine.normalize import alnum_count
from hippo_engine.progress import QUIET, Progress

logger = logging.getLogger(__name__)

#: spaCy entity labels that are not used as graph entities
SKIPPED_LABELS = frozenset({"CARDINAL", "ORDINAL", "QUANTITY", "PERCENT", "MONEY"})
TITLE_MAX_WORDS = 12
#: words a title does not end with: a first line ending with one runs on into the next line
RUN_ON_WORDS = frozenset("a an the of for and or nor but to in into on at by with from as than is are was were "
                         "be been that which who whose its their his her our your".split())


def continues(passage: str) -> bool:
    """Whether the first line of ``passage`` runs on into the second (hard-wrapped text): it ends with
    a comma, a semicolon or a hyphen, or with a lowercase word such as "the" or "for"
    (:data:`RUN_ON_WORDS`), or the second line starts with a lowercase letter where the break is one
    inside a wrapped paragraph (:func:`~hippo_engine.index.linebreaks.first_break_is_soft`: both
    lines are of wrapped width; a title over a one-line paragraph or a chunk cut mid-sentence is
    still a title)."""
    first, _, rest = passage.partition("\n")
    first, second = first.strip(), rest.split("\n", 1)[0].strip()
    words = first.split()
    if first.endswith((",", ";", "-")) or (bool(words) and words[-1] in RUN_ON_WORDS):
        return True
    return second[:1].islower() and first_break_is_soft(passage)


def passage_title(passage: str) -> str | None:
    """The first line of a multi-line passage when it looks like a title (short, has letters, and
    does not run on into the next line)."""
    if "\n" not in passage:
        return None
    first = passage.split("\n", 1)[0].strip()
    if not first or len(first.split()) > TITLE_MAX_WORDS or alnum_count(first) < 2:
        return None
    if continues(passage):
        return None
    return first


def doc_hyperedges(doc, title: str | None) -> list[Hyperedge]:
    """One hyperedge per sentence of a parsed passage (an entity crossing a sentence boundary
    belongs to the sentence it starts in); the title line is a sentence of its own."""
    out = []
    ents = [e for e in doc.ents if e.label_ not in SKIPPED_LABELS]
    for s in doc.sents:
        text = s.text.strip()
        if not text:
            continue
        names = [e.text for e in ents if s.start <= e.start < s.end]
        if title is not None:
            names.append(title)
        out.append(Hyperedge(text, tuple(dict.fromkeys(names))))
    return out


class NERExtractor:
    """Passages -> hyperedges, and queries -> entities, with the packaged spaCy pipeline (no LLM,
    deterministic). One pipeline (NER and sentence boundaries) loads on first use and stays with
    the object; queries run it with the sentence components switched off for the call (the same
    entities as a pipeline loaded without them, one model in memory instead of two)."""

    def __init__(self, model: str | None = None, *, batch_size: int = 64, progress: Progress = QUIET):
        self.model = model
        self.batch_size = batch_size
        self.progress = progress
        self._nlp = None
        self._lock = threading.Lock()

    def pipeline(self):
        """The loaded spaCy pipeline (NER and sentence boundaries), loaded on the first call."""
        from hippo_engine.models.spacy_ner import load_pipeline

        with self._lock:
            if self._nlp is None:
                with self.progress.loading(f"spaCy model {self.model or 'en_core_web_sm'}"):
                    self._nlp = load_pipeline(self.model, sentences=True)
            return self._nlp

    @property
    def max_chars(self) -> int:
        """The longest passage the pipeline takes (spaCy's ``max_length``, 1,000,000 by default)."""
        return self.pipeline().max_length

    def run(self, passages: Mapping[str, str]) -> dict[str, list[Hyperedge]]:
        """``{passage id: [hyperedge, ...]}`` for every passage (possibly empty lists). A passage
        longer than :attr:`max_chars` is refused up front, naming it and ``chunk_size``."""
        nlp = self.pipeline()
        long = next((p for p, t in passages.items() if len(t) > nlp.max_length), None)
        if long is not None:
            raise ValueError(f"passage {long!r} has {len(passages[long]):,} characters; spaCy takes at most "
                             f"{nlp.max_length:,}: split the document or set chunk_size to cut it into passages")
        ids = list(passages)
        titles = [passage_title(passages[p]) for p in ids]
        texts = [join_wrapped_lines(passages[p], keep_first=t is not None) for p, t in zip(ids, titles, strict=True)]
        out: dict[str, list[Hyperedge]] = {}
        docs = nlp.pipe(texts, batch_size=self.batch_size)
        for pid, title, doc in self.progress.bar(zip(ids, titles, docs, strict=True), total=len(ids), desc="NER",
                                                  disable=not ids):
            out[pid] = doc_hyperedges(doc, title)
        return out

    def query_entities(self, queries: Sequence[str]) -> list[list[str]]:
        """The named entities spaCy finds in each query (numeric types left out), raw text."""
        nlp = self.pipeline()
        queries = cut_long_queries(queries, nlp.max_length)
        off = [name for name in nlp.pipe_names if name in SENTENCE_COMPONENTS]
        docs = self.progress.bar(nlp.pipe(queries, batch_size=self.batch_size, disable=off), total=len(queries),
                                 desc="Query NER", disable=len(queries) < 2)
        return [[e.text for e in doc.ents if e.label_ not in SKIPPED_LABELS] for doc in docs]


def cut_long_queries(queries: Sequence[str], limit: int) -> list[str]:
    """``queries`` with those longer than ``limit`` characters (spaCy's ``max_length``) cut to
    their first ``limit``, with a warning: query NER reads the start of an over-long query
    rather than failing the search."""
    queries = list(queries)
    long = [i for i, q in enumerate(queries) if len(q) > limit]
    if long:
        logger.warning("query NER: %d query(ies) longer than spaCy's limit of %s characters (query %d: %s) "
                       "cut to their first %s characters", len(long), f"{limit:,}", long[0],
                       f"{len(queries[long[0]]):,}", f"{limit:,}")
        for i in long:
            queries[i] = queries[i][:limit]
    return queries


__all__ = ["NERExtractor", "RUN_ON_WORDS", "SKIPPED_LABELS", "continues", "cut_long_queries", "doc_hyperedges",
           "passage_title"]
