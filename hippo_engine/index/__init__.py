"""Indexing: passages, OpenIE, normalisation, synonymy and the graph."""
