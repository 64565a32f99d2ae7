"""A scripted OpenAI-compatible server on 127.0.0.1 for the wheel smoke job (.ci/smoke_wheel.sh).

It answers the engine's two OpenIE prompts deterministically: NER replies list the passage's
capitalised words, triple replies link consecutive entities. Usage:
``python smoke_server.py PORTFILE`` writes the chosen port to PORTFILE and serves until killed
(at most 10 minutes and 2,000 requests, so a stray run cannot hang CI).
"""
from __future__ import annotations

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_REQUESTS, MAX_SECONDS = 2000, 600
served = 0


def entities(text: str) -> list[str]:
    seen: dict[str, None] = {}
    for m in re.finditer(r"\b[A-Z][a-z]+(?: [A-Z][a-z]+)*", text):
        seen.setdefault(m.group(0))
    return list(seen)


def reply(messages: list[dict]) -> str:
    system = messages[0]["content"] if messages else ""
    last = messages[-1]["content"] if messages else ""
    passage = last.split("Named entities:", 1)[0]
    ents = entities(passage)
    if "triples" not in system:
        return json.dumps({"named_entities": ents})
    triples = [[a, "related to", b] for a, b in zip(ents, ents[1:], strict=False)]
    return json.dumps({"triples": triples})


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        global served
        served += 1
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if served > MAX_REQUESTS:
            return self._send(418, {"error": {"message": "request budget of the smoke server spent"}})
        text = reply(body.get("messages", []))
        self._send(200, {"id": f"smoke-{served}", "object": "chat.completion", "created": 0,
                         "model": body.get("model", "smoke"),
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text}}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}})

    def _send(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1], "w") as f:
        f.write(str(server.server_address[1]))
    threading.Timer(MAX_SECONDS, server.shutdown).start()
    server.serve_forever()
