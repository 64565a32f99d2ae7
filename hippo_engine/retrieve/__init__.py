"""Retrieval: the search objects of the modes, fact scoring, seeding, Personalized PageRank, the
recognition filter.

``searches`` (``Searches``: the mode table of search objects, built with each one's config section),
``search`` (the ``QuerySearch`` base, ``DenseSearch``), ``hipporag2_search`` (``HippoRAG2Search``),
``encoding`` (query vectors), ``current`` (``CurrentRetriever``: the ``Retriever`` of the index's
current version), ``retriever`` (the ``Retriever``: blocks of queries through linking, seeding and
PPR; its ``RawResult`` per query in ``raw_result``), ``filtering`` (``where=``: the ``Restrictor``;
the ``Restriction`` it builds in ``restriction``), ``linking`` (linking strategies and the
``LinkGraph`` they read), ``views`` (what the retriever reads, chosen once), ``passages`` (ranked
rows to ``QuerySolution``), ``fact_search`` (fact and entity searches), ``scoring`` (pure scoring
functions and matrix scans), ``seeding`` (entity/passage seeds, reset vectors, the ``SeedSource``
interface), ``ppr`` (the PPR kernel), ``query_ner`` (query entities), ``recognition`` and
``filter_program`` (the LLM filter and its DSPy program).
"""
