"""A scripted OpenAI-compatible chat server on 127.0.0.1 for the citations benchmark.

It knows each question's gold answers (its script) and replies like a careful reader: it cites the
shown passages whose text contains a gold answer (passage 1 when none does), in one of ``[1]``,
``[1, 3]``, ``(2)``, ``passage 2`` and the passage id, adds one citation of a passage that was not
shown, and ends with ``Answer: <first gold answer> [n]``. The format is picked by a hash of the
question text (:func:`citation_format`), not by the order requests arrive in, so a run's figures
repeat run to run whatever the reader's concurrency. A prompt without numbered passages (the
``plain`` and ``before`` readers) is not asked for citations and gets ``Answer: <first gold
answer>`` alone. It never looks at the gold passages, so the share of its citations on gold
passages measures the ranking, not the script.
"""
from __future__ import annotations

import json
import re
import threading
import zlib
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_PASSAGE = re.compile(r"^\[(\d+)\] Wikipedia Title: ", re.MULTILINE)


FORMATS = 5


def citation_format(question: str) -> int:
    """The citation format (0 to ``FORMATS - 1``) used for ``question``: CRC-32 of its UTF-8 text,
    stable across runs and processes (unlike ``hash``, which is salted per process)."""
    return zlib.crc32(question.encode("utf-8")) % FORMATS


def reply(user: str, answers: Mapping[str, Sequence[str]], fmt: int | None = None) -> str:
    """The scripted reply to one reader turn; ``fmt`` forces a citation format (default: the
    question's, :func:`citation_format`)."""
    from hippo_engine.ids import chunk_id

    question = user.rsplit("Question: ", 1)[-1].split("\nThought:", 1)[0].strip()
    gold = list(answers.get(question, [""]))
    starts = list(_PASSAGE.finditer(user))
    if not starts:                                   # passages not numbered: no citations asked for
        return f"The passages settle it.\nAnswer: {gold[0]}"
    blocks = [user[m.end():(starts[i + 1].start() if i + 1 < len(starts) else user.rfind("\n\nQuestion: "))]
              for i, m in enumerate(starts)]
    hits = [i + 1 for i, b in enumerate(blocks) if any(g and g.lower() in b.lower() for g in gold)] or [1]
    n = hits[0]
    fmt = citation_format(question) if fmt is None else fmt % FORMATS
    if fmt == 0:
        refs = "".join(f"[{h}]" for h in hits)
    elif fmt == 1:
        refs = "[" + ", ".join(map(str, hits)) + "]"
    elif fmt == 2:
        refs = f"({n})"
    elif fmt == 3:
        refs = f"passage {n}"
    else:
        refs = chunk_id(blocks[n - 1].strip()) if blocks else "[1]"
    return f"The answer is stated in {refs}; see also [{len(blocks) + 3}].\nAnswer: {gold[0]} [{n}]"


class ScriptedReaderServer:
    """``with ScriptedReaderServer(answers) as srv: srv.base_url``: answers chat completions.
    ``fmt`` (also settable as an attribute) forces one citation format for every question (tests);
    ``turns`` counts the requests (completion ids only)."""

    def __init__(self, answers: Mapping[str, Sequence[str]], fmt: int | None = None):
        self.answers, self.turns, self.fmt = dict(answers), 0, fmt
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with lock:
                    turn, server.turns = server.turns, server.turns + 1
                text = reply(body["messages"][-1]["content"], server.answers, server.fmt)
                data = json.dumps({"id": f"c{turn}", "object": "chat.completion", "model": body.get("model", "m"),
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": text}}],
                                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedReaderServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
