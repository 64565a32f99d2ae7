"""A LlamaIndex query engine over a HippoRAG memory: RetrieverQueryEngine(HippoRetriever, a response
synthesizer) with an LLM that calls an OpenAI-compatible server (a small ``CustomLLM`` on the ``openai``
client the engine already uses).

``python -m hippo_engine.integrations.examples.llamaindex_query --base-url http://127.0.0.1:8080/v1``
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hippo_engine.integrations.examples import parser, sample_memory, show


def server_llm(base_url: str, model: str, api_key: str):
    """A LlamaIndex LLM whose completions come from the chat server."""
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=api_key, timeout=60, max_retries=0)

    class ServerLLM(CustomLLM):
        """Completions from an OpenAI-compatible chat server."""

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name=model, is_chat_model=False)

        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}])
            return CompletionResponse(text=reply.choices[0].message.content or "")

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
            done = self.complete(prompt, formatted, **kwargs)
            yield CompletionResponse(text=done.text, delta=done.text)
    return ServerLLM()


def build(rag, base_url: str, model: str, api_key: str, mode: str, top_k: int):
    """The query engine and its retriever."""
    from llama_index.core.query_engine import RetrieverQueryEngine

    from hippo_engine.integrations.llamaindex import HippoRetriever

    retriever = HippoRetriever(rag, mode=mode, similarity_top_k=top_k)
    return RetrieverQueryEngine.from_args(retriever, llm=server_llm(base_url, model, api_key)), retriever


def main(argv: Sequence[str] | None = None) -> dict:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    engine, _ = build(sample_memory(args.save_dir), args.base_url, args.model, args.api_key, args.mode, args.top_k)
    response = engine.query(args.question)
    return show(str(response), [{"title": n.node.get_content().split("\n", 1)[0], "id": n.node.node_id,
                                 "score": n.score} for n in response.source_nodes])


if __name__ == "__main__":
    main()
