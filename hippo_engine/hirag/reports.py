"""Community reports written by the LLM (HiRAG communities, step 3).

Reports are written bottom-up (deepest level first, one ``llm.generate_many`` batch per level,
:func:`write_reports`). The prompt (``prompts/community_report.json``) shows the community's
entities, relations and passages (:func:`~hippo_engine.hirag.report_context.community_context`);
when they exceed the context budget and the community has children, the children's reports are
packed instead of the raw members they cover. The JSON reply (title, summary, findings, rating)
is parsed with :func:`hippo_engine.lenient_json.parse_json_lenient`; a failed call or malformed reply is
retried once (a malformed one with a correction turn), then replaced by a plain listing of the
members (``source="fallback"``) with a warning. Malformed replies are discarded from the LLM
cache after the retry, so a rebuild asks the model again instead of reading them back. A
community whose member set already has a stored report reuses it (reports are keyed by the
member-set hash).
"""
from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from hippo_engine.hirag.clustering import Community
from hippo_engine.hirag.report_context import (
    ReportInputs,
    TokenCounter,
    community_context,
    whitespace_tokens,
)
from hippo_engine.lenient_json import parse_json_lenient
from hippo_engine.llm.base import LLMClient, LLMResponse, unparseable_reason
from hippo_engine.progress import QUIET, Progress
from hippo_engine.prompts import load_json_prompt

logger = logging.getLogger(__name__)

REPORT_PROMPT = "community_report.json"
SOURCE_LLM, SOURCE_FALLBACK, SOURCE_LISTING = "llm", "fallback", "listing"


@dataclass
class CommunityReport:
    """A community report: what the LLM wrote, or the member listing that replaced it."""

    title: str
    summary: str
    findings: list[dict] = field(default_factory=list)   # [{"summary": str, "explanation": str}]
    rating: float = 0.0
    source: str = SOURCE_LLM          # "llm" | "fallback" (LLM failed twice) | "listing" (not asked)
    model: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    attempts: int = 0

    def text(self) -> str:
        """Markdown rendering: ``# title``, summary, then ``## finding`` + explanation blocks."""
        parts = [f"# {self.title}", self.summary]
        for f in self.findings:
            s, e = f.get("summary", ""), f.get("explanation", "")
            parts.append(f"## {s}\n{e}".rstrip())
        return "\n\n".join(p for p in parts if p)

    def to_json(self) -> dict:
        """A JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CommunityReport:
        """The report stored by ``to_json`` (unknown keys ignored)."""
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


# ============================================================================ prompts and parsing
def report_prompt() -> dict:
    """The report prompt file (system text, user template, one example, retry instruction)."""
    p = load_json_prompt(REPORT_PROMPT)
    for k in ("system", "user_template", "retry_instruction"):
        if not isinstance(p.get(k), str):
            raise ValueError(f"prompts/{REPORT_PROMPT} needs a string field {k!r}")
    return p


def report_messages(context: str, prompt: dict | None = None) -> list[dict]:
    """Chat messages asking for one community's report."""
    p = prompt or report_prompt()
    msgs = [{"role": "system", "content": p["system"]}]
    for ex in p.get("examples") or []:
        msgs.append({"role": "user", "content": p["user_template"].format(context=ex["context"])})
        msgs.append({"role": "assistant", "content": json.dumps(ex["report"], ensure_ascii=False)})
    msgs.append({"role": "user", "content": p["user_template"].format(context=context)})
    return msgs


def _clean_str(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, (list, tuple)):
        return " ".join(_clean_str(x) for x in v).strip()
    if isinstance(v, dict):
        return " ".join(_clean_str(x) for x in v.values()).strip()
    return str(v).strip()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_SALVAGE_SUFFIXES = ('"}', '"}]}', '"}], "rating": 0}', "]}", "}")


def collapse_repeats(text: str) -> str:
    """Drop sentences that already occurred in ``text`` (small models loop under greedy
    decoding and repeat one or a few sentences until the token limit)."""
    seen, out = set(), []
    for sent in _SENTENCE_END.split(text.strip()):
        key = " ".join(sent.lower().split())
        if key and key not in seen:
            seen.add(key)
            out.append(sent.strip())
    return " ".join(out)


def _report_fields(data: Any) -> dict:
    """Validate and normalise a parsed report (see :func:`parse_report`)."""
    if isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict):
        data = data[0]
    if not isinstance(data, dict):
        raise ValueError("the report is not a JSON object")
    data = {str(k).lower(): v for k, v in data.items()}
    title, summary = _clean_str(data.get("title")), collapse_repeats(_clean_str(data.get("summary")))
    if not title or not summary:
        raise ValueError("the report lacks a title or a summary")
    findings: list[dict] = []
    raw = data.get("findings") or []
    if isinstance(raw, dict):
        raw = [raw]
    if isinstance(raw, list):
        for f in raw:
            if isinstance(f, dict):
                f = {str(k).lower(): v for k, v in f.items()}
                s, e = _clean_str(f.get("summary")), collapse_repeats(_clean_str(f.get("explanation")))
            else:
                s, e = _clean_str(f), ""
            if (s or e) and (s, e) not in {(x["summary"], x["explanation"]) for x in findings}:
                findings.append({"summary": s, "explanation": e})
    try:
        rating = float(data.get("rating", 0.0))
        if not np.isfinite(rating):
            rating = 0.0
    except (TypeError, ValueError):
        rating = 0.0
    return {"title": title, "summary": summary, "findings": findings, "rating": min(max(rating, 0.0), 10.0)}


def parse_report(text: str) -> dict:
    """Validate a report reply: a JSON object with a non-empty ``title`` and ``summary``;
    ``findings`` becomes a list of ``{"summary", "explanation"}`` (strings accepted),
    ``rating`` a number clipped to [0, 10] (0 when missing or not a number). Repeated
    sentences are dropped. A reply cut off inside a string (a looping model hitting the token
    limit) is closed and kept when title and summary survive. Raises ``ValueError`` when
    malformed."""
    try:
        return _report_fields(parse_json_lenient(text))
    except ValueError as e:
        first = e
    body = (text or "").rstrip().rstrip("\\")
    best: dict | None = None
    for suffix in _SALVAGE_SUFFIXES:   # keep the closing that saves the most text
        try:
            cand = _report_fields(parse_json_lenient(body + suffix))
        except ValueError:
            continue
        if best is None or len(json.dumps(cand)) > len(json.dumps(best)):
            best = cand
    if best is None:
        raise first
    best["summary"] = _drop_unfinished(best["summary"])
    for f in best["findings"]:
        f["explanation"] = _drop_unfinished(f["explanation"])
    return best


def _drop_unfinished(text: str) -> str:
    """Cut a trailing unfinished sentence (text cut off by the token limit)."""
    if not text or text[-1] in ".!?":
        return text
    cut = max(text.rfind(". "), text.rfind("! "), text.rfind("? "))
    return text[: cut + 1] if cut > 0 else text


def listing_report(c: Community, inputs: ReportInputs, source: str, max_items: int = 12) -> CommunityReport:
    """A report that just lists the community's members and relations (no LLM)."""
    ents = sorted(c.entities, key=lambda e: (-inputs.degree.get(e, 0), inputs.name(e)))
    names = [inputs.name(e) for e in ents]
    title = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    pairs = sorted(c.edges, key=lambda p: (-inputs.edge_weight.get(p, 0.0), p))
    rels = [ln for p in pairs for ln in inputs.relation_lines(p)][:max_items]
    summary = f"Community of {len(names)} entities: " + ", ".join(names[:max_items]) + \
        (", ..." if len(names) > max_items else "") + "."
    findings = [{"summary": r, "explanation": ""} for r in rels]
    return CommunityReport(title=title or c.id, summary=summary, findings=findings, rating=0.0, source=source)


# ============================================================================ report writing
@dataclass
class ReportStats:
    """Counters of one report-writing run."""

    llm_calls: int = 0
    retries: int = 0
    written: int = 0          # reports written by the LLM
    fallbacks: int = 0        # LLM failed twice: member listing
    listings: int = 0         # not sent to the LLM (``max_llm_reports`` reached): member listing
    reused: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    children_packed: int = 0
    per_level: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """The counters as a dict."""
        return asdict(self)


def _bottom_up(comms: Sequence[Community]) -> list[int]:
    return sorted({c.level for c in comms}, reverse=True)


@dataclass
class _Asking:
    """What one report-writing run sends: the client (made on first need), its prompt, the
    generation settings, and the LLM reports still allowed (None: no limit)."""

    llm: LLMClient | Callable[[], LLMClient] | None
    max_new_tokens: int
    temperature: float | None
    progress: Progress
    left: int | None
    client: LLMClient | None = None
    prompt: dict = field(default_factory=dict)

    def connect(self) -> LLMClient:
        if self.client is None:
            llm = self.llm
            client = llm() if callable(llm) and not isinstance(llm, LLMClient) else llm
            if client is None:
                raise ValueError("reports are needed but no LLM was given")
            self.client, self.prompt = client, report_prompt()
        return self.client

    def generate(self, msgs: list, desc: str) -> list:
        return self.connect().generate_many(msgs, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                                            show_progress=self.progress.show, desc=desc)


@dataclass
class _Replies:
    """One level's replies: the first ones, the retries (of ``retry_idx``) and the parsed reports."""

    first: list
    parsed: list[dict | None]
    retry_idx: list[int] = field(default_factory=list)
    second: list = field(default_factory=list)

    def tokens(self, i: int) -> tuple[int, int]:
        """Prompt and completion tokens of report ``i``, over its attempts."""
        done = [self.first[i]] + ([self.second[self.retry_idx.index(i)]] if i in self.retry_idx else [])
        got = [r for r in done if isinstance(r, LLMResponse)]
        return sum(r.prompt_tokens for r in got), sum(r.completion_tokens for r in got)


def _triage(level_comms: list[Community], existing: Mapping[str, CommunityReport], inputs: ReportInputs,
            reports: dict[str, CommunityReport], stats: ReportStats, asking: _Asking) -> tuple[list[Community], int]:
    """Reuse the stored reports, list the communities beyond the LLM budget; returns the
    communities to ask and how many were reused."""
    todo = []
    for c in level_comms:
        if c.key in existing:
            reports[c.id] = existing[c.key]
            stats.reused += 1
        else:
            todo.append(c)
    left = asking.left
    ask = todo if left is None else todo[:max(left, 0)]
    for c in todo[len(ask):]:
        reports[c.id] = listing_report(c, inputs, SOURCE_LISTING)
        stats.listings += 1
    if left is not None:
        asking.left = left - len(ask)
    return ask, len(level_comms) - len(todo)


def _read_first(first: list, msgs: list, ask: list[Community], retry_instruction: str, stats: ReportStats,
                lvl: dict, bad: list[LLMResponse]) -> tuple[_Replies, list]:
    """Parse the first replies; returns them and the messages of the retries."""
    replies = _Replies(first, [None] * len(ask))
    retry_msgs = []
    for i, res in enumerate(first):
        _count_tokens(res, stats, lvl)
        if isinstance(res, LLMResponse):
            try:
                replies.parsed[i] = parse_report(res.text)
                continue
            except ValueError as e:
                bad.append(res)
                logger.info("community %s: malformed report (%s); retrying once", ask[i].id, e)
                retry_msgs.append(msgs[i] + [{"role": "assistant", "content": res.text},
                                             {"role": "user", "content": retry_instruction}])
        else:
            logger.info("community %s: report call failed (%s); retrying once", ask[i].id, res)
            retry_msgs.append(msgs[i])
        replies.retry_idx.append(i)
    return replies, retry_msgs


def _read_retries(replies: _Replies, ask: list[Community], stats: ReportStats, lvl: dict,
                  bad: list[LLMResponse]) -> None:
    for i, res in zip(replies.retry_idx, replies.second, strict=False):
        _count_tokens(res, stats, lvl)
        if isinstance(res, LLMResponse):
            try:
                replies.parsed[i] = parse_report(res.text)
            except ValueError as e:
                bad.append(res)
                logger.warning("community %s: report still malformed after a retry (%s: %s); using a member "
                               "listing", ask[i].id, unparseable_reason(res.text), e)
        else:
            logger.warning("community %s: report call failed twice (%s); using a member listing", ask[i].id, res)


def _ask_level(ask: list[Community], msgs: list, level: int, asking: _Asking, stats: ReportStats,
               lvl: dict) -> _Replies:
    """One ``generate_many`` batch for the level, then one for the retries."""
    first = asking.generate(msgs, f"Community reports (level {level})")
    stats.llm_calls += len(ask)
    bad: list[LLMResponse] = []   # unreadable replies: discarded from the LLM cache after the retry
    replies, retry_msgs = _read_first(first, msgs, ask, asking.prompt["retry_instruction"], stats, lvl, bad)
    if retry_msgs:
        replies.second = asking.generate(retry_msgs, f"Report retries (level {level})")
        stats.llm_calls += len(retry_msgs)
        stats.retries += len(retry_msgs)
    _read_retries(replies, ask, stats, lvl, bad)
    client = asking.connect()
    for res in bad:   # after the retry (which showed the model its first reply): a rerun asks anew
        client.discard(res)
    return replies


def _keep_replies(ask: list[Community], replies: _Replies, inputs: ReportInputs, model: str, dt: float,
                  reports: dict[str, CommunityReport], stats: ReportStats) -> None:
    """The level's reports: parsed replies, or member listings where both attempts failed."""
    for i, c in enumerate(ask):
        attempts = 2 if i in replies.retry_idx else 1
        fields = replies.parsed[i]
        if fields is None:
            reports[c.id] = listing_report(c, inputs, SOURCE_FALLBACK)
            reports[c.id].attempts = attempts
            stats.fallbacks += 1
            continue
        p_tok, c_tok = replies.tokens(i)
        reports[c.id] = CommunityReport(**fields, source=SOURCE_LLM, model=model, prompt_tokens=p_tok,
                                        completion_tokens=c_tok, seconds=dt / len(ask), attempts=attempts)
        stats.written += 1


def write_reports(comms: Sequence[Community], inputs: ReportInputs, llm: LLMClient | Callable[[], LLMClient] | None,
                  existing: Mapping[str, CommunityReport], *, budget: int = 3000,
                  count: TokenCounter = whitespace_tokens, max_new_tokens: int = 768,
                  temperature: float | None = 0.0, max_llm_reports: int | None = None,
                  progress: Progress = QUIET) -> tuple[dict[str, CommunityReport], ReportStats]:
    """Reports for ``comms`` (by community id), bottom-up.

    A community whose member key is in ``existing`` (``{member_key: report}``) reuses that
    report without an LLM call. Others are written by ``llm`` (an ``LLMClient`` or a zero-arg
    factory, called only if some report is needed), one ``generate_many`` batch per level;
    at most ``max_llm_reports`` are sent to the LLM (None: no limit), the rest get a member
    listing. A failed or malformed reply is retried once, then replaced by a listing.
    """
    stats = ReportStats()
    reports: dict[str, CommunityReport] = {}
    by_id = {c.id: c for c in comms}
    asking = _Asking(llm, max_new_tokens, temperature, progress, max_llm_reports)
    t_all = time.perf_counter()
    for level in _bottom_up(comms):
        level_comms = [c for c in comms if c.level == level]
        ask, reused = _triage(level_comms, existing, inputs, reports, stats, asking)
        lvl = {"communities": len(level_comms), "asked": len(ask), "reused": reused,
               "seconds": 0.0, "prompt_tokens": 0, "completion_tokens": 0}
        stats.per_level[level] = lvl
        if not ask:
            continue
        asking.connect()
        contexts = []
        for c in ask:
            ctx, used = community_context(c, inputs, reports, by_id, budget, count)
            stats.children_packed += int(used)
            contexts.append(ctx)
        msgs = [report_messages(ctx, asking.prompt) for ctx in contexts]
        t0 = time.perf_counter()
        replies = _ask_level(ask, msgs, level, asking, stats, lvl)
        dt = time.perf_counter() - t0
        lvl["seconds"] = dt
        _keep_replies(ask, replies, inputs, getattr(asking.client, "model_name", ""), dt, reports, stats)
        logger.info("community reports, level %d: %d written by the LLM in %.1fs, %d reused", level,
                    sum(1 for c in ask if reports[c.id].source == SOURCE_LLM), dt, lvl["reused"])
    stats.seconds = time.perf_counter() - t_all
    if stats.fallbacks:
        logger.warning("%d community report(s) fell back to a member listing after a failed retry", stats.fallbacks)
    return reports, stats


def _count_tokens(res: Any, stats: ReportStats, lvl: dict) -> None:
    if isinstance(res, LLMResponse):
        stats.prompt_tokens += res.prompt_tokens
        stats.completion_tokens += res.completion_tokens
        lvl["prompt_tokens"] += res.prompt_tokens
        lvl["completion_tokens"] += res.completion_tokens
