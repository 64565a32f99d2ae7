"""Moved to :mod:`hippo_engine.llm.providers` (the models package is below ``llm``). This name stays
only until its last importers (``hipporag.py``, ``service/workspace_parts.py``) import the new one;
then this file goes."""
from hippo_engine.llm.providers import Forwarded, Models, default_names

__all__ = ["Forwarded", "Models", "default_names"]
