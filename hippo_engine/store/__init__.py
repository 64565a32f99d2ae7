"""Storage: the SQLite index database and the embedding stores."""
