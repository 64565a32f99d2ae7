"""A LangChain (LCEL) chain over a HippoRAG memory: HippoRetriever -> ChatPromptTemplate -> a chat call to an
OpenAI-compatible server (through the ``openai`` client the engine already uses) -> StrOutputParser.

``python -m hippo_engine.integrations.examples.langchain_chain --base-url http://127.0.0.1:8080/v1``
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hippo_engine.integrations.examples import parser, sample_memory, show


def chat_call(base_url: str, model: str, api_key: str):
    """A runnable that sends a LangChain prompt to the server and returns the reply text."""
    from langchain_core.runnables import RunnableLambda
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=api_key, timeout=60, max_retries=0)
    roles = {"human": "user", "ai": "assistant", "system": "system"}

    def call(prompt) -> str:
        messages: list[Any] = [{"role": roles.get(m.type, "user"), "content": m.content} for m in prompt.to_messages()]
        reply = client.chat.completions.create(model=model, messages=messages)
        return reply.choices[0].message.content or ""
    return RunnableLambda(call)


def build(rag, base_url: str, model: str, api_key: str, mode: str, top_k: int):
    """The chain (question in, answer out) and its retriever."""
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough

    from hippo_engine.integrations.langchain import HippoRetriever

    retriever = HippoRetriever(rag, mode=mode, k=top_k)
    prompt = ChatPromptTemplate.from_messages([
        ("system", "Answer the question from the passages. Reply with the answer only."),
        ("human", "{context}\n\nQuestion: {question}")])

    def numbered(docs) -> str:
        return "\n".join(f"[{d.metadata['hippo_rank']}] {d.page_content}" for d in docs)
    chain = ({"context": retriever | numbered, "question": RunnablePassthrough()} | prompt
             | chat_call(base_url, model, api_key) | StrOutputParser())
    return chain, retriever


def main(argv: Sequence[str] | None = None) -> dict:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    chain, retriever = build(sample_memory(args.save_dir), args.base_url, args.model, args.api_key, args.mode,
                             args.top_k)
    answer = chain.invoke(args.question)
    docs = retriever.invoke(args.question)
    return show(answer, [{"title": d.page_content.split("\n", 1)[0], "id": d.id,
                          "score": d.metadata["hippo_score"]} for d in docs])


if __name__ == "__main__":
    main()
