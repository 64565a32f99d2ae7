"""HiRAG: hierarchical communities, their reports and HiRAG's retrieval modes."""
