"""An AgentScope agent that reads a HippoRAG memory: HippoKnowledgeBase behind AgentScope's RAGMiddleware
(static mode: the user's turn is searched and the passages are put before the model's call), the model an
``OpenAIChatModel`` on an OpenAI-compatible server.

``python -m hippo_engine.integrations.examples.agentscope_agent --base-url http://127.0.0.1:8080/v1``
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence

from hippo_engine.integrations.examples import parser, sample_memory, show


def build(rag, base_url: str, model: str, api_key: str, mode: str, top_k: int):
    """The agent and its knowledge base."""
    from agentscope.agent import Agent
    from agentscope.credential import OpenAICredential
    from agentscope.middleware import RAGMiddleware
    from agentscope.model import OpenAIChatModel
    from pydantic import SecretStr

    from hippo_engine.integrations.agentscope import HippoKnowledgeBase

    kb = HippoKnowledgeBase(rag, mode=mode)
    chat = OpenAIChatModel(credential=OpenAICredential(api_key=SecretStr(api_key), base_url=base_url), model=model,
                           stream=False, max_retries=1)
    rag_step = RAGMiddleware([kb], parameters=RAGMiddleware.Parameters(mode="static", top_k=top_k))
    agent = Agent(name="assistant", system_prompt="Answer from the knowledge base. Reply with the answer only.",
                  model=chat, middlewares=[rag_step])
    return agent, kb


async def ask(agent, kb, question: str, top_k: int) -> dict:
    """The agent's answer and the passages its knowledge base gave."""
    from agentscope.message import Msg, TextBlock

    reply = await agent.reply(Msg(name="user", role="user", content=[TextBlock(text=question)]))
    answer = "".join(b.text for b in reply.content if isinstance(b, TextBlock))
    found = await kb.search([question], top_k=top_k)
    return show(answer, [{"title": r.chunk.source, "document_id": r.document_id, "score": r.score} for r in found])


def main(argv: Sequence[str] | None = None) -> dict:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    agent, kb = build(sample_memory(args.save_dir), args.base_url, args.model, args.api_key, args.mode, args.top_k)
    return asyncio.run(ask(agent, kb, args.question, args.top_k))


if __name__ == "__main__":
    main()
