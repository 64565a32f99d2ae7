"""A Haystack pipeline over a HippoRAG memory: HippoRetriever -> ChatPromptBuilder -> OpenAIChatGenerator.

``python -m hippo_engine.integrations.examples.haystack_pipeline --base-url http://127.0.0.1:8080/v1``
(Haystack's telemetry is switched off here: nothing leaves the machine but the call to that server).
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from hippo_engine.integrations.examples import parser, sample_memory, show

TEMPLATE = """Answer the question from the passages. Reply with the answer only.
{% for doc in documents %}[{{ loop.index }}] {{ doc.content }}
{% endfor %}
Question: {{ question }}"""


def build(rag, base_url: str, model: str, api_key: str, mode: str, top_k: int):
    """The pipeline: ``retriever`` (HippoRetriever) -> ``prompt`` (ChatPromptBuilder) -> ``llm``."""
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    from haystack import Pipeline
    from haystack.components.builders import ChatPromptBuilder
    from haystack.components.generators.chat import OpenAIChatGenerator
    from haystack.dataclasses import ChatMessage
    from haystack.utils import Secret

    from hippo_engine.integrations.haystack import HippoRetriever

    pipe = Pipeline()
    pipe.add_component("retriever", HippoRetriever(rag, mode=mode, top_k=top_k))
    pipe.add_component("prompt", ChatPromptBuilder(template=[ChatMessage.from_user(TEMPLATE)],
                                                   required_variables=["question", "documents"]))
    pipe.add_component("llm", OpenAIChatGenerator(api_key=Secret.from_token(api_key), model=model,
                                                  api_base_url=base_url, timeout=60, max_retries=0))
    pipe.connect("retriever.documents", "prompt.documents")
    pipe.connect("prompt.prompt", "llm.messages")
    return pipe


def main(argv: Sequence[str] | None = None) -> dict:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    pipe = build(sample_memory(args.save_dir), args.base_url, args.model, args.api_key, args.mode, args.top_k)
    result = pipe.run({"retriever": {"query": args.question}, "prompt": {"question": args.question}},
                      include_outputs_from={"retriever"})
    docs = result["retriever"]["documents"]
    return show(result["llm"]["replies"][0].text or "",
                [{"title": d.content.split("\n", 1)[0], **{k: d.meta[k] for k in ("hippo_rank", "hippo_score",
                                                                                 "hippo_doc_ids")}} for d in docs])


if __name__ == "__main__":
    main()
