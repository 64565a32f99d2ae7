"""The second walk and the one score: second-hop strategies (``second_hop``), the retriever's second walk
(``second_walk``), what a hop reads of a hyperedge index (``hop_index``) and one score per passage
(``fusion``)."""
