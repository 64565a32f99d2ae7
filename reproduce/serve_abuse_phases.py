"""The three loads of ``serve-abuse`` (:mod:`reproduce.serve_abuse`), each against a running server.

* :func:`abandoned_answers`: ``/answer`` calls whose clients leave after ``leave_after`` seconds (raw
  sockets: send the request, read what comes, close), while :class:`Prober` threads time ``/health`` and
  ``/retrieve``; the reader LLM's own record (:mod:`.serve_abuse_llm`) says which calls outlived their client.
* :func:`sockets`: idle sockets (connected, nothing sent) and slow-header sockets (a header line every few
  seconds), each watched for the server closing it, while ``/health`` is probed on fresh connections.
* :func:`workspaces`: workspaces created in turn (one small document each, its job followed), documents
  added to the default workspace meanwhile, the server's RSS, threads and descriptors sampled from /proc.

Every request goes to 127.0.0.1 with a timeout; every loop has a count and a deadline.
"""
from __future__ import annotations

import json
import os
import select
import socket
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

#: seconds one probe may take before it counts as failed
PROBE_TIMEOUT = 5.0


@dataclass
class Probe:
    """One timed request: when it was sent, how long it took, its status (None: no answer)."""
    t: float
    seconds: float
    status: int | None
    error: str | None = None


@dataclass
class Prober:
    """A thread sending one request every ``every`` seconds until :meth:`stop`: the next when the last
    answered, on one keep-alive client; or, ``fresh``, each on a new connection in a thread of its own, on
    time whether or not the ones before answered (a stalled server then shows in every probe it stalls)."""
    url: str
    method: str
    path: str
    every: float
    body: Any = None
    fresh: bool = False
    timeout: float = PROBE_TIMEOUT
    probes: list[Probe] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"probe{self.path}")

    def start(self) -> Prober:
        self._thread.start()
        return self

    def stop(self) -> list[Probe]:
        self._stop.set()
        self._thread.join(self.timeout + 5)
        return sorted(self.probes, key=lambda p: p.t)

    def _loop(self) -> None:
        import httpx
        if self.fresh:
            threads: list[threading.Thread] = []
            while not self._stop.is_set():
                threads.append(threading.Thread(target=lambda: self.probes.append(self.once()), daemon=True))
                threads[-1].start()
                self._stop.wait(self.every)
            for t in threads:
                t.join(self.timeout + 5)
            return
        with httpx.Client(base_url=self.url, timeout=self.timeout) as client:
            while not self._stop.is_set():
                self.probes.append(self.once(client))
                self._stop.wait(self.every)

    def once(self, client=None) -> Probe:
        """One request, timed: on ``client``, or (None) a bodiless request on a new connection
        (:func:`raw_request`: no client object to build, so the time is the server's and the network's)."""
        import httpx
        t = time.monotonic()
        if client is None:
            status, error = raw_request(self.url, self.method, self.path, self.timeout)
            return Probe(t, time.monotonic() - t, status, error)
        try:
            r = client.request(self.method, self.path, json=self.body)
            return Probe(t, time.monotonic() - t, r.status_code, None if r.status_code < 400 else r.text[:200])
        except httpx.HTTPError as e:
            return Probe(t, time.monotonic() - t, None, f"{type(e).__name__}: {e}"[:200])


def raw_request(url: str, method: str, path: str, timeout: float) -> tuple[int | None, str | None]:
    """``METHOD path`` without a body on a new connection to ``url`` (``http://127.0.0.1:PORT``), read to
    its end: (status, None), or (status or None, what went wrong) when not a 2xx or no full answer."""
    port = int(url.rsplit(":", 1)[1])
    deadline, data = time.monotonic() + timeout, b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            while (left := deadline - time.monotonic()) > 0:
                s.settimeout(left)
                piece = s.recv(65536)
                if not piece:
                    break
                data += piece
            else:
                raise TimeoutError("timed out")
    except OSError as e:
        return _status(data), f"{type(e).__name__}: {e}"[:200]
    status = _status(data)
    if status is None:
        return None, "no HTTP answer"
    return status, None if status < 400 else data.split(b"\r\n\r\n", 1)[-1][:200].decode("latin-1")


def _status(data: bytes) -> int | None:
    """The status of an HTTP/1.x response's first line (None: none yet)."""
    if not data.startswith(b"HTTP/1.") or b" " not in data:
        return None
    try:
        return int(data.split(b" ", 2)[1])
    except ValueError:
        return None


def within(probes: list[Probe], start: float, end: float) -> list[Probe]:
    """The probes sent between ``start`` and ``end``."""
    return [p for p in probes if start <= p.t <= end]


# ----------------------------------------------------------------------------- phase 1
def abandon(port: int, tag: int, question: str, stream: bool, leave_after: float) -> dict:
    """Send ``POST /answer`` (question tagged ``[abuse-tag]``), read for ``leave_after`` seconds, close.
    ``abandoned``: the server had not finished (closed) the reply when the client left."""
    body = json.dumps({"question": f"[abuse-{tag}] {question}", "top_k": 3, "stream": stream}).encode()
    head = (f"POST /answer HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    out: dict[str, Any] = {"tag": tag, "stream": stream, "status": None, "abandoned": True, "error": None}
    data = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT) as s:
            s.sendall(head + body)
            out["sent"] = time.monotonic()
            while (left := out["sent"] + leave_after - time.monotonic()) > 0:
                s.settimeout(left)
                try:
                    piece = s.recv(65536)
                except TimeoutError:
                    break
                if not piece:
                    out["abandoned"] = False        # the server finished the reply (and closed)
                    break
                data += piece
    except OSError as e:
        out["error"], out["abandoned"] = f"{type(e).__name__}: {e}"[:200], False
    out["left"] = time.monotonic()
    out.setdefault("sent", out["left"])
    out["status"] = _status(data)
    return out


def abandoned_answers(port: int, questions: list[str], n: int, clients: int, leave_after: float,
                      stream_share: float) -> list[dict]:
    """``n`` abandoned answers from ``clients`` threads (each sends its next one when it left the last);
    every ``round(1 / stream_share)``-th asks for the event stream."""
    every = round(1 / stream_share) if stream_share > 0 else 0
    results: list[dict] = []
    lock, next_tag = threading.Lock(), [0]

    def client() -> None:
        while True:
            with lock:
                tag, next_tag[0] = next_tag[0], next_tag[0] + 1
            if tag >= n:
                return
            stream = bool(every) and tag % every == every - 1
            r = abandon(port, tag, questions[tag % len(questions)], stream, leave_after)
            with lock:
                results.append(r)
    threads = [threading.Thread(target=client, daemon=True, name=f"abandon-{i}") for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results, key=lambda r: r["tag"])


def left_running(answers: list[dict], calls, grace: float, now: float) -> dict:
    """The LLM calls still running ``grace`` seconds after their client left (by the LLM's own record),
    those that started only after their client left, and those still open at ``now``."""
    left = {a["tag"]: a["left"] for a in answers}
    tagged = [c for c in calls if c.tag in left]
    late = [c for c in tagged if c.running_at(left[c.tag] + grace) or c.start > left[c.tag] + grace]
    return {"llm_calls": len(calls), "llm_calls_tagged": len(tagged), "left_running": len(late),
            "started_after_client_left": sum(c.start > left[c.tag] for c in tagged),
            "in_flight_when_client_left": sum(c.start <= left[c.tag] for c in tagged),
            "open_at_end": sum(c.end is None for c in calls),
            "closed_by_server": sum(c.how == "closed" for c in calls),
            "replied": sum(c.how == "replied" for c in calls),
            "seconds_after_client_left": sorted(round((c.end or now) - left[c.tag], 2) for c in tagged)}


# ----------------------------------------------------------------------------- phase 2
@dataclass
class Watched:
    """One of our sockets: its kind, when it was opened, when the server answered on it or closed it."""
    kind: str
    sock: socket.socket | None
    opened: float
    error: str | None = None
    answered: float | None = None
    first_bytes: str | None = None
    closed: float | None = None

    def report(self) -> dict:
        d = asdict(self)
        d.pop("sock")
        return d


def open_sockets(port: int, kind: str, n: int, first: bytes = b"") -> list[Watched]:
    """``n`` connections to the server, each sending ``first`` (nothing for idle sockets)."""
    out = []
    for _ in range(n):
        t = time.monotonic()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT)
            s.setblocking(False)
            if first:
                s.send(first)
            out.append(Watched(kind, s, t))
        except OSError as e:
            out.append(Watched(kind, None, t, error=f"{type(e).__name__}: {e}"[:200]))
    return out


def watch(socks: list[Watched]) -> None:
    """One look at every socket still open on the server's side: record data and end of stream."""
    live = {w.sock: w for w in socks if w.sock is not None and w.closed is None}
    if not live:
        return
    readable, _, _ = select.select(list(live), [], [], 0.1)
    for s in readable:
        w = live[s]
        try:
            data = s.recv(4096)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        now = time.monotonic()
        if data and w.answered is None:
            w.answered, w.first_bytes = now, data[:80].decode("latin-1")
        if not data:
            w.closed = now


def drip(socks: list[Watched], line: bytes) -> None:
    """Send one more header line on each slow socket the server did not close (a refused send closes it)."""
    for w in socks:
        if w.sock is None or w.closed is not None:
            continue
        try:
            w.sock.send(line)
        except BlockingIOError:
            pass
        except OSError:
            w.closed = time.monotonic()


def sockets(port: int, idle: int, slow: int, seconds: float, interval: float) -> list[Watched]:
    """``idle`` idle and ``slow`` slow-header sockets held for ``seconds`` (a header line every ``interval``
    seconds on each slow one), watched for the server closing them; all closed at the end."""
    first = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
    socks = open_sockets(port, "idle", idle) + open_sockets(port, "slow", slow, first)
    start = time.monotonic()
    next_drip, k = start + interval, 0
    try:
        while time.monotonic() < start + seconds:
            watch(socks)
            if time.monotonic() >= next_drip:
                k += 1
                drip([w for w in socks if w.kind == "slow"], f"X-Slow-{k}: {k}\r\n".encode())
                next_drip += interval
    finally:
        for w in socks:
            if w.sock is not None:
                w.sock.close()
    return socks


def socket_summary(socks: list[Watched], kind: str) -> dict:
    """How many sockets of ``kind`` opened, were answered, were closed by the server, and when."""
    mine = [w for w in socks if w.kind == kind]
    after = sorted(round(w.closed - w.opened, 1) for w in mine if w.closed is not None)
    return {"asked": len(mine), "connected": sum(w.sock is not None for w in mine),
            "connect_errors": sum(w.error is not None for w in mine),
            "answered": sum(w.answered is not None for w in mine),
            "answers": sorted({(w.first_bytes or "").split("\r\n", 1)[0] for w in mine if w.first_bytes}),
            "closed_by_server": len(after), "closed_after_s_min": after[0] if after else None,
            "closed_after_s_max": after[-1] if after else None, "closed_after_s": after}


# ----------------------------------------------------------------------------- phase 3
def proc_sample(pid: int) -> dict:
    """The process's resident memory (MB), threads and open descriptors, from /proc (empty if gone)."""
    try:
        status = open(f"/proc/{pid}/status").read()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return {"t": time.monotonic(), "rss_mb": int(fields["VmRSS"].split()[0]) / 1024,
                "threads": int(fields["Threads"]), "fds": len(os.listdir(f"/proc/{pid}/fd"))}
    except (OSError, KeyError, ValueError):
        return {}


def follow_job(client, prefix: str, job_id: str, timeout: float) -> str:
    """Poll ``GET {prefix}/jobs/{job_id}`` until done or failed (or ``timeout``): the last status seen."""
    import httpx
    deadline, status = time.monotonic() + timeout, "unknown"
    while time.monotonic() < deadline:
        try:
            r = client.get(f"{prefix}/jobs/{job_id}")
        except httpx.HTTPError as e:
            return f"error: {type(e).__name__}"
        if r.status_code != 200:
            return f"http {r.status_code}"
        status = r.json().get("status", "unknown")
        if status in ("done", "failed"):
            return status
        time.sleep(0.1)
    return f"timeout ({status})"


def post_one(client, prefix: str, doc: dict) -> tuple[int | None, str | None, str | None]:
    """``POST {prefix}/documents`` with one document: (status, job id, error text)."""
    import httpx
    try:
        r = client.post(f"{prefix}/documents", json={"documents": [doc]})
    except httpx.HTTPError as e:
        return None, None, f"{type(e).__name__}: {e}"[:200]
    if r.status_code == 202:
        return 202, r.json()["job_id"], None
    return r.status_code, None, r.text[:200]


def workspaces(url: str, pid: int, n: int, default_every: int, job_timeout: float, deadline: float,
               rss_stop_mb: float) -> dict:
    """Create workspaces ``ws-000`` ... in turn (one document each, its job followed); every
    ``default_every`` workspaces add a document to the default workspace (not waited for). Stops early past
    ``deadline`` or when the server's RSS passes ``rss_stop_mb`` (``stopped`` says why)."""
    import httpx
    rows: list[dict[str, Any]] = []
    default_ids: list[str] = []
    samples = [{"workspaces": 0, "created": 0, **proc_sample(pid)}]
    stopped = None
    with httpx.Client(base_url=url, timeout=30.0) as c:
        for i in range(n):
            if time.monotonic() > deadline:
                stopped = "time limit"
                break
            if samples[-1].get("rss_mb", 0) > rss_stop_mb:
                stopped = f"server RSS over {rss_stop_mb:g} MB"
                break
            if default_every and i % default_every == 0:
                doc_id = f"default-{i:03d}"
                status, _, error = post_one(c, "", {"id": doc_id, "text": f"The default workspace note {i}."})
                default_ids.append(doc_id)
                rows.append({"workspace": "default", "status": status, "job": None, "error": error})
            prefix, t = f"/w/ws-{i:03d}", time.monotonic()
            status, job, error = post_one(c, prefix, {"id": "note", "text": f"Workspace {i} keeps one note."})
            outcome = follow_job(c, prefix, job, job_timeout) if job else None
            rows.append({"workspace": f"ws-{i:03d}", "status": status, "job": outcome, "error": error,
                         "seconds": round(time.monotonic() - t, 2)})
            created = sum(r["status"] == 202 and r["workspace"] != "default" for r in rows)
            samples.append({"workspaces": i + 1, "created": created, **proc_sample(pid)})
    return {"rows": rows, "default_ids": default_ids, "samples": samples, "stopped": stopped}


def document_states(url: str, prefixes: list[str]) -> dict[str, dict[str, str]]:
    """Each document's status in each workspace of ``prefixes`` (``""``: the default), or the error."""
    import httpx
    out: dict[str, dict[str, str]] = {}
    with httpx.Client(base_url=url, timeout=30.0) as c:
        for prefix in prefixes:
            states: dict[str, str] = {}
            for page in range(100):
                try:
                    r = c.get(f"{prefix}/documents", params={"limit": 500, "offset": 500 * page})
                except httpx.HTTPError as e:
                    states["<request>"] = f"error: {type(e).__name__}"
                    break
                if r.status_code != 200:
                    states["<request>"] = f"http {r.status_code}"
                    break
                docs = r.json().get("documents", [])
                states.update({d["id"]: d["status"] for d in docs})
                if len(docs) < 500:
                    break
            out[prefix or "default"] = states
    return out
