"""GraphRAG's query modes (nano-graphrag's ``local`` and ``global``) over any index: see
:mod:`.local` and :mod:`.global_search`. They reuse the HiRAG communities and reports
(:mod:`hippo_engine.hirag`); building those is explicit (``build_communities``)."""
