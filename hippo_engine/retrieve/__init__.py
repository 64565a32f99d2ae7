"""Retrieval: the search objects of the modes, fact scoring, seeding, Personalized PageRank, the
recognition filter.

``searches`` (``Searches``: the mode table of search objects, the per-version ``Retriever``),
``search`` (the ``QuerySearch`` base, ``DenseSearch``), ``hipporag2_search`` (``HippoRAG2Search``),
``retriever`` (the ``Retriever``: blocks of queries through linking, seeding and PPR), ``linking``
(linking strategies), ``views`` (what the retriever reads, chosen once), ``fact_search`` (fact and
entity searches), ``scoring`` (pure scoring functions and matrix scans), ``seeding`` (entity/passage
seeds, reset vectors, the ``SeedSource`` interface), ``ppr`` (the PPR kernel), ``query_ner`` (query
entities), ``recognition`` and ``filter_program`` (the LLM filter and its DSPy program).
"""
