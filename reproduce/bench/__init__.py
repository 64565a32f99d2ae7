"""Speed benchmarks: the synthetic suite (``python -m reproduce bench``) and the MuSiQue subset
(``python -m reproduce bench-musique``)."""
