"""The query layer: the search objects of every registered mode over one index (:mod:`.factory`) and what
the facade's query calls do with them (:mod:`.runner`). The modes themselves are registered in
:mod:`hippo_engine.modes`."""
