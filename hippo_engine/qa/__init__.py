"""Question answering: the reader and its prompt (``reader``), scoring against gold labels
(``evaluate``)."""
