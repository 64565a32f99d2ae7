"""Retrieval: the ranking of the modes' searches (HippoRAG 2: fact scoring, seeding, Personalized PageRank,
the recognition filter), in rooms by job. Each subpackage's ``__init__`` only describes it (no re-exports).

Top level (the search objects and what they share):
``search`` (the ``QuerySearch`` base, ``DenseSearch``), ``hipporag2_search`` (``HippoRAG2Search``),
``retriever`` (the ``Retriever``: blocks of queries through linking, seeding and the walks), ``raw_result``
(its ``RawResult`` per query, the filter's signature), ``encoding`` (query vectors), ``filtering``
(``where=``: the ``Restrictor``), ``restriction`` (the ``Restriction`` it builds), ``views`` (what the
retriever reads of an index version, chosen once), ``passages`` (ranked rows to ``QuerySolution``),
``scoring`` (pure scoring functions and matrix scans), ``top_rank`` (``dense_agree``), ``trace`` (what a
search keeps for explanations).

Subpackages:
``facts/`` (from the query to the walk's seeds): ``linking`` (linking strategies, the ``LinkGraph``),
``fact_search`` (fact and entity searches), ``seeding`` (entity/passage seeds, reset vectors, the
``SeedSource`` interface), ``query_ner`` (query entities), ``kept_facts`` (the filter's step),
``recognition`` and ``filter_program`` (the LLM filter and its DSPy program).
``ppr/`` (the walk and its solvers): ``kernel`` (the PPR kernel), ``push`` (forward push) with
``push_prior``, ``push_ann`` and ``push_refine``, ``ann_prior`` (the passage prior from an ANN index),
``walk_update`` (a walk from a nearby walk), ``solver`` (the walk as the ``PPRConfig`` section says).
``second/`` (the second walk and the one score): ``second_hop`` (its strategies), ``second_walk`` (the
retriever's second walk), ``hop_index`` (what a hop reads of a hyperedge index), ``fusion`` (one score per
passage).
``explain/`` (explanations of a ranking): ``core`` (``explain_result``, ``explain_solutions``,
``graph_view``), ``fusion`` (the score's terms by seed), ``math`` (seed contributions), ``solve`` (the
backward solver), ``walks`` (most probable walks).

Imports go one way: ``ppr`` reads nothing else of ``retrieve``, ``facts`` only ``scoring``; ``second``
reads ``facts``, ``ppr``, ``restriction`` and ``views``; the ``Retriever`` reads all three; ``explain``
reads the ``Retriever``.
"""
