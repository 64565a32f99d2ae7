"""Question answering: the query calls behind the facade (``runner``: ``QueryRunner``), the reader
and its prompt (``reader``), scoring against gold labels (``evaluate``)."""
