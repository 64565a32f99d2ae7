"""Explanations of a HippoRAG 2 ranking: the entry functions (``core``: ``explain_result``,
``explain_solutions``, ``graph_view``), the one score's terms by seed (``fusion``), seed contributions
(``math``), the backward solver (``solve``) and the most probable walks (``walks``). Reads the
``Retriever``, which does not read it (what a search keeps for it: ``retrieve.trace``)."""
