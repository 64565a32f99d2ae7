"""What an extractor returns (:class:`Extraction`), shared by the extractor strategies."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from hippo_engine.text import Hyperedge, Triple


def safe_name(name: str) -> str:
    """A model name usable in a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"


@dataclass
class Extraction:
    """Facts of the passages that got them; ``failed`` maps the others to their error."""

    triples: dict[str, list[Triple]] | None = None
    hyperedges: dict[str, list[Hyperedge]] | None = None
    failed: dict[str, str] = field(default_factory=dict)
    llm_passages: int = 0     # passages sent to an LLM in this call

    @property
    def passages(self) -> set[str]:
        return set(self.triples or {}) | set(self.hyperedges or {})
