"""The graph knowledge-base query modes of AgentScope's Neo4j design over any index:
``kb_vector`` (:mod:`.vector`), ``kb_graph`` (:mod:`.graph`), ``kb_hybrid`` (:mod:`.hybrid`) and
``kb_global`` (:mod:`.global_search`). Each returns ranked passages (documents); the reader reads
the top ``qa_top_k`` of them as in ``naive``."""
