"""Retrieval configurations compared by the tables: HippoRAG 2 with retrieval-time overrides, or dense."""
from __future__ import annotations

from dataclasses import dataclass

from hippo_engine import HippoConfig

DEFAULTS = HippoConfig()


@dataclass(frozen=True)
class Method:
    """One retrieval configuration: engine overrides (retrieval-time settings only) or dense."""

    key: str
    label: str
    overrides: tuple = ()
    dense: bool = False

    @property
    def config(self) -> dict:
        """The overrides that differ from the defaults (``use_filter`` dropped where it has no
        effect, i.e. when the query is not linked through facts)."""
        # use_filter=True is the default on an LLM-extracted index (the config says None: auto)
        out = {k: v for k, v in self.overrides if getattr(DEFAULTS, k) != v and (k, v) != ("use_filter", True)}
        linking = dict(self.overrides).get("linking", DEFAULTS.linking)
        if linking not in ("fact", "auto"):
            out.pop("use_filter", None)
        return dict(sorted(out.items()))

    @property
    def needs_llm(self) -> bool:
        """Whether retrieval calls the LLM (recognition filter or query NER)."""
        if self.dense:
            return False
        cfg = {**{"linking": DEFAULTS.linking, "use_filter": DEFAULTS.use_filter}, **dict(self.overrides)}
        return cfg["linking"] == "ner" or (cfg["linking"] in ("fact", "auto") and cfg["use_filter"] is not False)


def method(key: str, label: str, dense: bool = False, **overrides) -> Method:
    """A :class:`Method` from keyword overrides."""
    return Method(key, label, tuple(sorted(overrides.items())), dense)


def dense_method(label: str) -> Method:
    """Dense retrieval (the embedder alone)."""
    return method("dense", label, dense=True)


def hippo_method(use_filter: bool, key: str = "hipporag2", label: str = "HippoRAG 2", **overrides) -> Method:
    """HippoRAG 2 with optional overrides; the label says when the filter is off."""
    if not use_filter and overrides.get("linking", "fact") == "fact" and "filter" not in label:
        label = f"{label[:-1]}, filter off)" if label.endswith(")") else f"{label} (filter off)"
    return method(key, label, use_filter=use_filter, **overrides)


def ablation_methods(use_filter: bool) -> list[Method]:
    """The paper's Table 4 rows, all on the same index."""
    ms = [hippo_method(use_filter, "full", "HippoRAG 2 (full)"),
          method("ner", "NER-to-node (query NER entities -> entity nodes)", linking="ner"),
          method("query", "Query-to-node (query embedding -> entity nodes)", linking="query"),
          hippo_method(use_filter, "no_passage", "w/o passage nodes", use_passage_nodes=False)]
    if use_filter:
        ms.append(hippo_method(False, "no_filter", "w/o recognition filter"))
    return ms
