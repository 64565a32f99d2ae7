"""The walk and its solvers: the Personalized PageRank kernel (``kernel``), forward push (``push``, with
``push_prior``, ``push_ann`` and ``push_refine``), the passage prior from an ANN index (``ann_prior``) and a
walk from a nearby walk (``walk_update``); ``solver`` runs them as the PPR section (``PPRConfig``) says.
Reads nothing else of ``retrieve``."""
