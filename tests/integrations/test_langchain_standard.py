"""LangChain's own conformance suite for retrievers (``langchain-tests``' ``RetrieversIntegrationTests``) run
against our LangChain retriever over a real memory, with its defaults: only the constructor and a query are
given (issue 39). It checks LangChain's ``k`` in the constructor and per call, ``invoke``/``ainvoke`` returning
``Document`` lists, and that none of its tests is overridden here."""
from __future__ import annotations

import pytest

pytest.importorskip("langchain_core", reason="needs the langchain extra")
pytest.importorskip("langchain_tests", reason="needs langchain-tests (the test extra)")
from langchain_tests.integration_tests import RetrieversIntegrationTests  # noqa: E402

from hippo_engine.integrations.langchain import HippoRetriever  # noqa: E402


class TestHippoRetrieverStandard(RetrieversIntegrationTests):
    """The standard tests; the memory is the shared sample-corpus memory (conftest's ``rag``)."""

    @pytest.fixture(autouse=True)
    def _memory(self, rag) -> None:
        self.memory = rag

    @property
    def retriever_constructor(self) -> type[HippoRetriever]:
        return HippoRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"memory": self.memory}

    @property
    def retriever_query_example(self) -> str:
        return "In which city was the founder of the Vellmar Observatory born?"
