"""From a query to the walk's seeds: linking strategies (``linking``), fact and entity searches
(``fact_search``), seeds and reset vectors (``seeding``), query entities (``query_ner``), and the recognition
filter (``recognition``, its DSPy program ``filter_program``, its step ``kept_facts``). Reads only
``retrieve.scoring`` of ``retrieve``."""
