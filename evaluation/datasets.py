"""Benchmark loaders for the HippoRAG 2 release format and the HippoRAG v1 formats.

A dataset is a pair of JSON files side by side::

    <name>.json          questions (a list of dicts)
    <name>_corpus.json   passages

and, optionally, an OpenIE file (``openie_*.json``) in the corpus's folder, for instance the
released GPT-3.5 OpenIE output of HippoRAG v1. LinearRAG's layout
(``<name>/linearrag_format/questions.json`` with ``<name>/<name>_corpus.json``) and an explicit
corpus file are accepted too (:mod:`.locate`).

Corpus formats
    * a list of ``{"title", "text"}`` dicts (HippoRAG 2 release, HippoRAG v1 MuSiQue/2Wiki;
      extra keys such as ``idx`` are ignored);
    * a dict ``title -> text`` or ``title -> [sentences]`` (HippoRAG v1 HotpotQA); sentences are
      joined with ``""``, as HippoRAG v1 did (HotpotQA sentences carry their own leading spaces).

Every passage becomes the document ``"title\\ntext"``, exactly what the reference implementation
indexes; retrieved passages and gold passages are compared as these exact strings.

Question formats (one file may mix them; each question is read on its own)
    * MuSiQue style: ``paragraphs: [{title, paragraph_text | text, is_supporting}]``; the gold
      passages are the paragraphs not marked ``is_supporting: false``;
    * ``contexts: [{title, text, is_supporting}]``: the gold passages are those marked supporting;
    * 2Wiki / HotpotQA style: ``context: [[title, [sentences]]]`` with
      ``supporting_facts: [[title, sentence_index]]``: the gold passages are the context entries
      whose title appears in ``supporting_facts``.
    * evidence-derived gold: ``evidence: [[subject, relation, object]]`` and none of the above
      (LinearRAG's 2WikiMultihopQA questions): the gold passages are the pages of the evidence
      subjects, matched to corpus titles by :func:`.evidence_gold.derive_gold` (called once for
      all such questions of the file). Its counts are in ``gold_match`` as ``evidence_<rule>``
      per (question, subject) pair, plus ``evidence_questions`` and ``evidence_complete``
      (questions whose every subject was matched: the coverage). A question with unmatched
      subjects keeps its partial gold.
    * none of these: the question has no gold passages (recall cannot be measured for it).

How gold passages are matched to corpus passages
    The reference implementation rebuilds a gold passage from the question file (for context
    style: ``title + "\\n" + " ".join(sentences)``, ``"".join`` for HotpotQA) and hopes it equals
    the corpus string. We resolve every gold passage to the corpus document it stands for, so
    that recall compares like with like:

    1. the rebuilt string is a corpus document -> that document (``exact``);
    2. context style only: the corpus has exactly one document with that title -> it
       (``by_title``); if it has several, the one whose text equals the joined sentences after
       collapsing whitespace, tried with both joins (``by_title``);
    3. paragraph/contexts style: the corpus document equal to it after collapsing whitespace
       (``by_whitespace``);
    4. otherwise the rebuilt string is kept (``unmatched``: it can never be retrieved; a
       warning gives the count).

    The counts are in ``Dataset.gold_match``.

Gold answers are ``answer`` (a string or a list), or ``gold_ans`` / ``reference``, or the PopQA
fields ``obj`` / ``possible_answers`` / ``o_wiki_title`` / ``o_aliases``; ``answer_aliases`` are
added. Duplicates are dropped, the main answer stays first.

``load_dataset(dir_or_name)`` accepts a questions file, a folder, or a dataset name looked up
under the data root (env ``HIPPO_DATA_DIR``, else ``../shared/data`` next to this repository).
"""
from __future__ import annotations

import json
import logging
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .evidence_gold import derive_gold, has_evidence_only
from .locate import KNOWN_DATASETS, DatasetError, _pairs_in, corpus_path, dataset_name, default_data_root, find_dataset

logger = logging.getLogger(__name__)

_WS = re.compile(r"\s+")


@dataclass
class Dataset:
    """A loaded benchmark.

    Attributes:
        name: the dataset name (``<name>.json`` without the suffix), e.g. ``"musique"``.
        docs: corpus passages as ``"title\\ntext"`` strings, in file order, duplicates dropped.
        questions: question strings.
        gold_docs: per question, its gold passages (strings from ``docs`` where they could be
            matched); ``None`` when no question in the file has gold passages.
        gold_answers: per question, the accepted answers (main answer first).
        openie_file: an ``openie_*.json`` found beside the data, else ``None``.
        question_ids: the ``id`` / ``_id`` of each question (or its position as a string).
        path: the questions file.
        corpus_path: the corpus file.
        gold_match: how gold passages were matched to the corpus (see the module docstring).
    """

    name: str
    docs: list[str]
    questions: list[str]
    gold_docs: list[list[str]] | None
    gold_answers: list[list[str]]
    openie_file: Path | None = None
    question_ids: list[str] = field(default_factory=list)
    path: Path | None = None
    corpus_path: Path | None = None
    gold_match: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.questions)

    def head(self, n: int | None) -> Dataset:
        """The same dataset with only its first ``n`` questions (all when ``n`` is ``None``).
        The corpus is unchanged."""
        if n is None or n >= len(self.questions):
            return self
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        return Dataset(name=self.name, docs=self.docs, questions=self.questions[:n],
                       gold_docs=None if self.gold_docs is None else self.gold_docs[:n],
                       gold_answers=self.gold_answers[:n], openie_file=self.openie_file,
                       question_ids=self.question_ids[:n], path=self.path,
                       corpus_path=self.corpus_path, gold_match=dict(self.gold_match))

    def summary(self) -> dict[str, Any]:
        """Counts for logs and reports."""
        return {"name": self.name, "passages": len(self.docs), "questions": len(self.questions),
                "with_gold_docs": 0 if self.gold_docs is None else sum(1 for g in self.gold_docs if g),
                "gold_match": dict(self.gold_match),
                "openie_file": str(self.openie_file) if self.openie_file else None}


# ----------------------------------------------------------------------------- parsing
def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)  # json accepts the bare NaN of some released files
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path} is not valid JSON: {e}") from e


def corpus_docs(corpus: Any, source: str = "corpus") -> list[str]:
    """Corpus JSON (list of ``{title,text}`` or dict ``title -> text | [sentences]``) as
    ``"title\\ntext"`` documents, file order, exact duplicates dropped."""
    docs: list[str] = []
    if isinstance(corpus, dict):
        for title, body in corpus.items():
            if isinstance(body, (list, tuple)):
                body = "".join(str(s) for s in body)
            if not isinstance(body, str):
                raise DatasetError(f"{source}: entry {title!r} is neither text nor a list of sentences")
            docs.append(f"{title}\n{body}")
    elif isinstance(corpus, list):
        for i, item in enumerate(corpus):
            if not isinstance(item, dict) or "text" not in item:
                raise DatasetError(f"{source}: item {i} is not a {{title, text}} object")
            docs.append(f"{item.get('title', '')}\n{item['text']}")
    else:
        raise DatasetError(f"{source}: expected a list of {{title, text}} or a dict title -> text")
    unique = list(dict.fromkeys(docs))
    if len(unique) < len(docs):
        logger.info("%s: %d duplicate passage(s) dropped", source, len(docs) - len(unique))
    return unique


def _squash(text: str) -> str:
    return _WS.sub(" ", text).strip()


class _CorpusIndex:
    """Lookups from rebuilt gold passages to corpus documents."""

    def __init__(self, docs: Sequence[str]):
        self.exact = set(docs)
        self.by_title: dict[str, list[str]] = {}
        self.squashed: dict[str, str] = {}
        for d in docs:
            title = d.split("\n", 1)[0]
            self.by_title.setdefault(title, []).append(d)
            self.squashed.setdefault(_squash(d), d)

    def resolve_paragraph(self, title: str, text: str, counts: Counter) -> str:
        doc = f"{title}\n{text}"
        if doc in self.exact:
            counts["exact"] += 1
            return doc
        hit = self.squashed.get(_squash(doc))
        if hit is not None:
            counts["by_whitespace"] += 1
            return hit
        counts["unmatched"] += 1
        return doc

    def resolve_context(self, title: str, sentences: Sequence[str], joiner: str, counts: Counter) -> str:
        sentences = [str(s) for s in sentences]
        joins = [joiner.join(sentences), ("" if joiner == " " else " ").join(sentences)]
        for body in joins:
            doc = f"{title}\n{body}"
            if doc in self.exact:
                counts["exact"] += 1
                return doc
        same_title = self.by_title.get(title, [])
        if len(same_title) == 1:
            counts["by_title"] += 1
            return same_title[0]
        if same_title:
            wanted = {_squash(b) for b in joins}
            for d in same_title:
                if _squash(d.split("\n", 1)[1]) in wanted:
                    counts["by_title"] += 1
                    return d
        counts["unmatched"] += 1
        return f"{title}\n{joins[0]}"


def _resolve(index: _CorpusIndex, p: dict, counts: Counter) -> str:
    return index.resolve_paragraph(str(p.get("title", "")), str(p.get("text", p.get("paragraph_text", ""))), counts)


def _gold_for(sample: dict, index: _CorpusIndex, joiner: str, counts: Counter) -> list[str] | None:
    """Gold passages of one question, or ``None`` when the question carries no evidence."""
    if "supporting_facts" in sample and "context" in sample:
        titles = {str(f[0]) for f in sample["supporting_facts"] if f}
        gold = [index.resolve_context(str(item[0]), item[1], joiner, counts)
                for item in sample["context"] if item and str(item[0]) in titles]
    elif "contexts" in sample:
        gold = [_resolve(index, p, counts) for p in sample["contexts"] if p.get("is_supporting")]
    elif "paragraphs" in sample:
        gold = [_resolve(index, p, counts) for p in sample["paragraphs"] if p.get("is_supporting", True) is not False]
    else:
        return None
    return list(dict.fromkeys(gold))


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("[") and s.endswith("]"):  # PopQA stores some lists as JSON text
            try:
                parsed = json.loads(s)
            except ValueError:
                return [value]
            if isinstance(parsed, list):
                return [str(v) for v in parsed if v is not None]
        return [value]
    if isinstance(value, (list, tuple, set)):
        out: list[str] = []
        for v in value:
            out.extend(_as_list(v))
        return out
    return [str(value)]


def gold_answers_for(sample: dict) -> list[str]:
    """Accepted answers of one question (main answer first, then aliases, no duplicates)."""
    answers: list[str] = []
    for key in ("answer", "gold_ans", "reference"):
        if key in sample:
            answers = _as_list(sample[key])
            break
    else:
        if "obj" in sample or "possible_answers" in sample:
            answers = []
            for key in ("obj", "possible_answers", "o_wiki_title", "o_aliases"):
                answers.extend(_as_list(sample.get(key)))
    answers.extend(_as_list(sample.get("answer_aliases")))
    return list(dict.fromkeys(a for a in answers if a.strip()))


def parse_questions(samples: Any, docs: Sequence[str], name: str = "",
                    source: str = "questions") -> tuple[list[str], list[list[str]] | None, list[list[str]],
                                                          list[str], dict[str, int]]:
    """Questions, gold passages, gold answers, ids and gold-match counts from question JSON."""
    if not isinstance(samples, list):
        raise DatasetError(f"{source}: expected a list of question objects, got {type(samples).__name__}")
    joiner = "" if name.startswith("hotpotqa") else " "
    index = _CorpusIndex(docs)
    counts: Counter = Counter()
    questions, golds, answers, ids = [], [], [], []
    for i, s in enumerate(samples):
        if not isinstance(s, dict):
            raise DatasetError(f"{source}: item {i} is not an object")
        q = s.get("question", s.get("query"))
        if not isinstance(q, str) or not q.strip():
            raise DatasetError(f"{source}: item {i} has no 'question' string")
        questions.append(q)
        golds.append(_gold_for(s, index, joiner, counts))
        answers.append(gold_answers_for(s))
        ids.append(str(s.get("id", s.get("_id", i))))
    _evidence_gold(samples, docs, golds, counts, source)
    if counts.get("unmatched"):
        logger.warning("%s: %d gold passage(s) match no corpus passage and can never be retrieved",
                       source, counts["unmatched"])
    no_answer = sum(1 for a in answers if not a)
    if no_answer:
        logger.warning("%s: %d question(s) have no gold answer", source, no_answer)
    gold_docs: list[list[str]] | None
    if all(g is None for g in golds):
        gold_docs = None
    else:
        missing = sum(1 for g in golds if g is None)
        if missing:
            logger.warning("%s: %d question(s) carry no evidence; they count as recall 0", source, missing)
        gold_docs = [g or [] for g in golds]
    return questions, gold_docs, answers, ids, dict(counts)


def _evidence_gold(samples: list, docs: Sequence[str], golds: list, counts: Counter, source: str) -> None:
    """Fill the gold of the questions that carry only ``evidence`` triples (format rule
    "evidence-derived gold"), all in one :func:`derive_gold` call."""
    todo = [i for i, s in enumerate(samples) if golds[i] is None and has_evidence_only(s)]
    if not todo:
        return
    try:
        gold, stats = derive_gold([samples[i] for i in todo], docs)
    except ValueError as e:
        raise DatasetError(f"{source}: {e}") from e
    for i, g in zip(todo, gold, strict=True):
        golds[i] = g
    counts.update({f"evidence_{rule}": n for rule, n in stats["rules"].items()})
    counts["evidence_questions"] += len(todo)
    counts["evidence_complete"] += sum(stats["complete"])
    if counts["evidence_complete"] < len(todo):
        logger.warning("%s: evidence-derived gold is incomplete for %d of %d question(s) (%d subject(s) matched "
                       "no corpus title)", source, len(todo) - counts["evidence_complete"], len(todo),
                       counts.get("evidence_unmatched", 0))


def _find_openie(folder: Path, name: str) -> Path | None:
    """An ``openie_*.json`` beside the data: one naming the dataset if there is one; otherwise
    any, but only when the folder holds this dataset alone (in a shared folder an unnamed
    OpenIE file could belong to another dataset)."""
    files = sorted(folder.glob("openie_*.json"))
    named = [f for f in files if name in f.name]
    if named:
        files = named
    elif files and len(_pairs_in(folder)) > 1:
        logger.warning("OpenIE file(s) %s in %s name no dataset and the folder holds several datasets; "
                       "not using them (pass --openie FILE)", [f.name for f in files], folder)
        return None
    if len(files) > 1:
        logger.info("several OpenIE files in %s; using %s (pass --openie to choose)", folder, files[0].name)
    return files[0] if files else None


def load_dataset(dir_or_name: str | os.PathLike, data_root: str | os.PathLike | None = None,
                 name: str | None = None, corpus: str | os.PathLike | None = None) -> Dataset:
    """Load a benchmark (see the module docstring for formats and lookup rules). ``corpus``:
    an explicit corpus file for the questions file ``dir_or_name`` (any names)."""
    if corpus is not None:
        qpath, cpath = Path(dir_or_name).expanduser(), Path(corpus).expanduser()
        for p in (qpath, cpath):
            if not p.is_file():
                raise DatasetError(f"{p}: no such file")
        ds_name = name or dataset_name(qpath)
    else:
        qpath = find_dataset(dir_or_name, data_root, name)
        cpath, ds_name = corpus_path(qpath), dataset_name(qpath)
    docs = corpus_docs(_read_json(cpath), str(cpath))
    questions, gold_docs, answers, ids, counts = parse_questions(_read_json(qpath), docs, ds_name, str(qpath))
    ds = Dataset(name=ds_name, docs=docs, questions=questions, gold_docs=gold_docs, gold_answers=answers,
                 openie_file=_find_openie(cpath.parent, ds_name), question_ids=ids, path=qpath, corpus_path=cpath,
                 gold_match=counts)
    logger.info("loaded dataset %s: %s", ds_name, ds.summary())
    return ds


__all__ = ["Dataset", "DatasetError", "KNOWN_DATASETS", "corpus_docs", "corpus_path", "dataset_name",
           "default_data_root", "find_dataset", "gold_answers_for", "load_dataset", "parse_questions"]
