"""Shared by the graphrag_* and kb_* tests: the toy corpus indexed with communities, and a scripted
responder for OpenIE, community reports, and the global map and reduce calls."""
from __future__ import annotations

import json

from helpers import CORPUS, toy_respond

from hippo_engine.prompts import load_json_prompt

REPORT_SYSTEM = load_json_prompt("community_report.json")["system"]
MAP_SYSTEM = load_json_prompt("graphrag_map.json")["system"]
QUERIES = ["Who founded Tamsin College?", "Where was Ilse Marrow born?", "What is the capital of Kaldavia?"]


class PeerResponder:
    """OpenIE (toy), reports (JSON naming the first member), map (a point per report line that
    mentions a word of the question, scored by how many), reduce (``Answer: <best point>``).
    Counts the calls of each kind and keeps the map and reduce prompts."""

    def __init__(self, map_reply=None):
        self.calls = {"report": 0, "map": 0, "reduce": 0, "other": 0}
        self.map_prompts: list[str] = []
        self.reduce_prompts: list[list[dict]] = []
        self.map_reply = map_reply

    def __call__(self, messages) -> str:
        system = messages[0]["content"]
        if system == REPORT_SYSTEM:
            self.calls["report"] += 1
            ctx = messages[-1]["content"]
            first = next((ln[2:] for ln in ctx.splitlines() if ln.startswith("- ")), "group")
            return json.dumps({"title": f"About {first}", "summary": f"A group around {first}.",
                               "findings": [{"summary": f"{first} is central.", "explanation": "Most links."}],
                               "rating": 4})
        if system == MAP_SYSTEM:
            self.calls["map"] += 1
            user = messages[-1]["content"]
            self.map_prompts.append(user)
            if self.map_reply is not None:
                return self.map_reply(user)
            question = user.split("Question: ", 1)[1].split("\n", 1)[0]
            words = {w.strip("?.,").lower() for w in question.split() if len(w) > 3}
            reports = user.split("Community reports:\n", 1)[1].rsplit("\n\nThe helpful points", 1)[0]
            points = [{"description": r[:80], "score": 10 + 20 * sum(w in r.lower() for w in words)}
                      for r in reports.split("\n\n") if r.strip()]
            return "```json\n" + json.dumps({"points": points}) + "\n```"
        if "key points" in system:
            self.calls["reduce"] += 1
            self.reduce_prompts.append(messages)
            best = messages[-1]["content"].split("\n")[1].split("] ", 1)[-1]
            return f"The points say so.\nAnswer: {best[:40]}"
        self.calls["other"] += 1
        if system.startswith("You answer a question from the passages"):      # the reader: one answer line
            return f"The passages say so.\nAnswer: {messages[-1]['content'].splitlines()[0][:40]}"
        return toy_respond(messages)


def built_rag(path, responder=None, **kw):
    """The toy corpus indexed (toy OpenIE), with communities and LLM reports (max cluster size 3)."""
    from fakes import ScriptedLLM
    from helpers import make_rag
    responder = responder or PeerResponder()
    rag = make_rag(path, llm=ScriptedLLM(responder), max_cluster_size=3, use_filter=False, **kw)
    rag.index(CORPUS)
    rag.build_communities()
    return rag, responder
