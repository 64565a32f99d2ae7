"""Framework adapters: a :class:`~hippo_engine.HippoRAG` memory inside other frameworks.

Each submodule imports its framework lazily and is installed with the extra of the same name:

- :mod:`hippo_engine.integrations.haystack` (``pip install "hippo-engine[haystack]"``): a retriever and a
  writer component for a Haystack ``Pipeline``;
- :mod:`hippo_engine.integrations.agentscope` (``[agentscope]``): an AgentScope knowledge base;
- :mod:`hippo_engine.integrations.langchain` (``[langchain]``): a LangChain ``BaseRetriever``;
- :mod:`hippo_engine.integrations.llamaindex` (``[llamaindex]``): a LlamaIndex ``BaseRetriever``.

The shared part (which memory, which mode, the metadata each result carries) is in
:mod:`hippo_engine.integrations.common`.
"""
