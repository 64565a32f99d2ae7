"""``QueryParam``: the options of one ``retrieve``/``rag_qa`` call (re-exported by :mod:`hippo_engine.config`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hippo_engine.errors import ConfigError
from hippo_engine.modes import mode_names


@dataclass(frozen=True)
class QueryParam:
    """Options of one ``retrieve``/``rag_qa`` call (the configuration holds the defaults).

    mode: ``hipporag2`` (default), ``naive`` (dense), or a HiRAG mode (``hi_local``,
        ``hi_global``, ``hi_bridge``, ``hi``; see ``hippo_engine.hirag``).
    top_k: passages to return (None: ``retrieval_top_k``).
    qa_top_k: passages the reader sees (None: ``qa_top_k``).
    use_filter: switch the recognition filter on or off for this call (None: the config's).
    explain: explain each solution's ranking; the ranking is the same (except on a large PostgreSQL index
        whose passage prior comes from its HNSW index, ``dense_prior="auto"``: an explained query is ranked
        with every passage scored, which its explanation needs). ``hipporag2`` fills
        ``explanations`` (per passage, its PPR terms and walks), the hi_* modes ``provenance`` (every item
        of the assembled context, with its section and why it was chosen); ``naive`` explains nothing.
    where: a metadata filter (``{"user": "alice"}``, ``{"time": {"$gte": 10}}``; the language is in
        :mod:`hippo_engine.store.metadata`): only passages of matching documents are ranked
        (see :mod:`hippo_engine.retrieve.filtering`). None: every passage.
    only_need_context: ``rag_qa`` returns each query's assembled context as its response, with no LLM call.
    response_type: the answer's form in the graphrag_* modes (None: ``graphrag_response_type``).
    level: communities up to this level in the graphrag_* modes (None: ``graphrag_level``).
    text_unit_tokens, local_context_tokens, community_report_tokens: the graphrag_* token budgets
        (None: the ``graphrag`` section's); in ``graphrag_global`` the report budget is one map batch's.
    score_threshold: the kb_* modes' minimum cosine (None: ``kb_score_threshold``); ``top_k`` is their limit.
    """

    mode: str = "hipporag2"
    top_k: int | None = None
    qa_top_k: int | None = None
    use_filter: bool | None = None
    explain: bool = False
    where: Any = None
    only_need_context: bool = False
    response_type: str | None = None
    level: int | None = None
    text_unit_tokens: int | None = None
    local_context_tokens: int | None = None
    community_report_tokens: int | None = None
    score_threshold: float | None = None

    def __post_init__(self) -> None:
        names = mode_names()
        if self.mode not in names:
            raise ConfigError(f"mode must be one of {', '.join(names)}; got {self.mode!r}")
        for name in ("top_k", "qa_top_k", "text_unit_tokens", "local_context_tokens", "community_report_tokens"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise ConfigError(f"{name} must be a positive integer or None, got {v!r}")
        if self.level is not None and (not isinstance(self.level, int) or isinstance(self.level, bool)
                                       or self.level < 0):
            raise ConfigError(f"level must be a non-negative integer or None, got {self.level!r}")
        if not isinstance(self.only_need_context, bool):
            raise ConfigError(f"only_need_context must be True or False, got {self.only_need_context!r}")
        r = self.response_type
        if r is not None and (not isinstance(r, str) or not r.strip()):
            raise ConfigError(f"response_type must be a non-empty string or None, got {r!r}")
        t = self.score_threshold
        if t is not None and (isinstance(t, bool) or not isinstance(t, int | float) or not -1.0 <= t <= 1.0):
            raise ConfigError(f"score_threshold must be a number in [-1, 1] or None, got {t!r}")
        if self.use_filter is not None and not isinstance(self.use_filter, bool):
            raise ConfigError(f"use_filter must be True, False or None, got {self.use_filter!r}")
        if self.where is not None:
            from hippo_engine.metadata_check import parse_where
            try:
                parse_where(self.where)
            except (TypeError, ValueError) as e:
                raise ConfigError(str(e)) from None
