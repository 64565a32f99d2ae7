"""Retrieval: fact scoring, seeding, Personalized PageRank, the recognition filter."""
