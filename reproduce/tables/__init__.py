"""The paper's tables, one command per table (``python -m reproduce table-...``).

Each command writes ``reproduce/results/<dataset>/<table>.md`` (``<table>-no-filter.md`` with
``--no-filter``, ``...-firstN.md`` with ``--limit N``; ``--extractor`` other than openie,
``--dense-first N`` and ``--shuffle-corpus SEED`` add ``-ner``, ``-dense-firstN``, ``-shuffleSEED``):
our figures beside the paper's (:mod:`reproduce.tables.paper`;
"n/a" where the paper has none), the models, the exact command, the git commit, the wall time and
the LLM tokens spent. Recall tables also get a PNG of the Recall@k curves next to the markdown.

Resumable and cached:
    * one index per dataset, embedder and extractor in ``--save-dir`` (default
      ``outputs/reproduce/<dataset>/<embedder>``, ``...-ner`` for the ner extractor), built once and
      reused by every table and every configuration: ablations and sweeps are retrieval-time
      settings, so each configuration is ``HippoRAG(same_dir, **overrides)`` on the same index;
    * every LLM reply is cached by the engine in ``save_dir/llm_cache.sqlite``;
    * per-question results are appended to ``save_dir/reproduce_runs/*.jsonl`` as they are
      computed, so a rerun after a crash (or another table needing the same configuration)
      continues where it stopped. ``--recompute`` ignores them.
"""
