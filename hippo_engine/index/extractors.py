"""Extractors: how new passages get their facts at index time (the config field ``extractor``).

Each is a small strategy object with one method, ``extract(passages) -> Extraction``:

* :class:`OpenIEExtractor` (``"openie"``, the paper): LLM NER then triples, results kept in the
  reference OpenIE file under ``save_dir`` (an imported file counts too), so only passages
  missing from it reach the LLM and a crash loses no LLM work. The file is read only when an
  extraction or import needs it: querying or deleting never depends on it.
* :class:`SpacyExtractor` (``"ner"``): no LLM; sentences linked to their spaCy entities.
* :class:`NaryExtractor` (``"nary"``): LLM n-ary facts (knowledge segments and their entities),
  kept in their own results file like OpenIE's.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from hippo_engine.datatypes import Extraction
from hippo_engine.index.ner import NERExtractor
from hippo_engine.index.openie import OpenIE, OpenIEResult, load_openie_file, save_openie_file
from hippo_engine.index.results_file import ResultsFile, safe_name
from hippo_engine.llm.base import LLMClient
from hippo_engine.progress import QUIET, Progress

logger = logging.getLogger(__name__)


class OpenIEExtractor:
    """LLM OpenIE with its results file (``openie_results_ner_<llm>.json``, reference format)."""

    name = "openie"

    def __init__(self, save_dir: Path, llm_name: str, llm: Callable[[], LLMClient], *, max_new_tokens: int,
                 progress: Progress = QUIET):
        self.path = Path(save_dir) / f"openie_results_ner_{safe_name(llm_name)}.json"
        self._llm, self.llm_name = llm, llm_name
        self.max_new_tokens, self.progress = max_new_tokens, progress
        self.file = ResultsFile(self.path, load_openie_file, save_openie_file, "OpenIE results file")

    @property
    def results(self) -> dict[str, OpenIEResult]:
        """The results file's content, read when first needed (an index call that extracts, an
        import), so a damaged file does not stop opening the index to query or delete. A file
        that cannot be read raises an error naming it."""
        return self.file.results

    def import_file(self, path: str | Path) -> int:
        """Seed results from a reference or HippoRAG v1 OpenIE file; returns how many passages."""
        loaded = load_openie_file(path)
        self.results.update(loaded)
        self.file.save()
        logger.info("imported OpenIE results for %d passages from %s", len(loaded), path)
        return len(loaded)

    def extract(self, passages: Mapping[str, str]) -> Extraction:
        self.file.refresh()      # another process may have extracted some meanwhile
        missing = {k: v for k, v in passages.items() if k not in self.results}
        failed: dict[str, str] = {}
        if missing:
            logger.info("running OpenIE on %d passage(s) with %s", len(missing), self.llm_name)
            runner = OpenIE(self._llm(), max_new_tokens=self.max_new_tokens, progress=self.progress)
            results, failed = runner.run(missing)
            self.results.update(results)
            self.file.save()
        ok = [k for k in passages if k in self.results]
        return Extraction(triples={k: self.results[k].triples for k in ok}, failed=failed,
                          llm_passages=len(missing))


class SpacyExtractor:
    """No LLM: each sentence is a fact linked to its spaCy entities (see :mod:`.ner`)."""

    name = "ner"

    def __init__(self, *, progress: Progress = QUIET, runner: NERExtractor | None = None):
        self.runner = runner or NERExtractor(progress=progress)

    @property
    def max_chars(self) -> int:
        """The longest passage spaCy takes (``index()`` refuses longer ones up front)."""
        return self.runner.max_chars

    def extract(self, passages: Mapping[str, str]) -> Extraction:
        return Extraction(hyperedges=self.runner.run(passages)) if passages else Extraction(hyperedges={})


def make_extractor(kind: str, save_dir: Path, llm_name: str, llm: Callable[[], LLMClient], *,
                   max_new_tokens: int, progress: Progress = QUIET, ner: NERExtractor | None = None):
    """The extractor strategy for ``kind`` (``openie``, ``ner`` or ``nary``); ``ner``: the spaCy
    runner to share (the facade uses the same one for query NER)."""
    if kind == "openie":
        return OpenIEExtractor(save_dir, llm_name, llm, max_new_tokens=max_new_tokens, progress=progress)
    if kind == "ner":
        return SpacyExtractor(progress=progress, runner=ner)
    if kind == "nary":
        from hippo_engine.index.nary import NaryExtractor
        return NaryExtractor(save_dir, llm_name, llm, max_new_tokens=max_new_tokens, progress=progress)
    raise ValueError(f"unknown extractor {kind!r}")


__all__ = ["Extraction", "OpenIEExtractor", "SpacyExtractor", "make_extractor", "safe_name"]
