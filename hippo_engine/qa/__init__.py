"""Question answering: the reader and its prompt."""
