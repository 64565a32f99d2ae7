"""Retrieval: fact scoring, seeding, Personalized PageRank, the recognition filter.

``scoring`` (pure scoring functions and matrix scans), ``seeding`` (entity/passage seeds, reset
vectors, the ``SeedSource`` interface), ``ppr`` (the PPR kernel), ``recognition`` and
``filter_program`` (the LLM filter and its DSPy program), ``retriever`` (the ``Retriever``
orchestrating them).
"""
