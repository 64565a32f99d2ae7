"""HiRAG: hierarchical communities, their reports and HiRAG's retrieval modes.

``component.HiRAG`` (owned by the ``HippoRAG`` facade) ties the modules together:
``clustering`` (seeded hierarchical Leiden), ``report_context`` and ``reports`` (LLM community
reports), ``store`` (community persistence), ``communities`` (the build pipeline), ``seeds``
(community nodes as a PPR seed source), ``context`` (context assembly), ``provenance`` (why each
item of a context is there), ``modes`` (the mode table) and ``search`` (the hi_* modes as search
objects).
"""
