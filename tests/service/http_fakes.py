"""A small in-memory stand-in for ``Memory`` and ``Workspaces`` (the interface of
hippo_engine/service/memory.py and workspaces.py), for the HTTP unit tests only: documents are
"indexed" at once, retrieval scores passages by shared words. The integration tests use the real ones."""
from __future__ import annotations

import hashlib
import re
import threading
from datetime import datetime, timezone

from hippo_engine.service.routes_base import WORKSPACE_PATTERN

WORDS = re.compile(r"\w+")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _words(text: str) -> set[str]:
    return {w.lower() for w in WORDS.findall(text)}


class FakeMemory:
    """Indexes on ``add`` (a text containing ``FAIL`` fails); retrieve ranks by word overlap."""

    def __init__(self) -> None:
        self.docs: dict[str, dict] = {}
        self.jobs: dict[str, dict] = {}
        self.calls: list[tuple] = []
        self.closed = False
        self.lock = threading.Lock()
        self.raise_on: dict[str, BaseException] = {}

    def _check(self, name: str) -> None:
        self.calls.append((name,))
        if name in self.raise_on:
            raise self.raise_on[name]

    def add(self, docs: list[dict]) -> dict:
        self._check("add")
        with self.lock:
            job_id = f"job-{len(self.jobs) + 1}"
            ids = []
            for d in docs:
                doc_id = d.get("id") or hashlib.sha1(d["text"].encode("utf-8", "replace")).hexdigest()[:16]
                failed = "FAIL" in d["text"]
                self.docs[doc_id] = {"id": doc_id, "text": d["text"], "title": d.get("title"),
                                     "metadata": d.get("metadata"), "status": "failed" if failed else "indexed",
                                     "error": "extraction failed" if failed else None, "job_id": job_id,
                                     "updated": _now()}
                ids.append(doc_id)
            self.jobs[job_id] = {"ids": ids, "created": _now()}
            return {"job_id": job_id, "documents": ids}

    def job(self, job_id: str) -> dict | None:
        self._check("job")
        job = self.jobs.get(job_id)
        if job is None:
            return None
        docs = [{"id": i, "status": self.docs[i]["status"] if i in self.docs else "failed",
                 "error": self.docs[i]["error"] if i in self.docs else "deleted"} for i in job["ids"]]
        counts = {s: sum(d["status"] == s for d in docs) for s in ("pending", "processing", "indexed", "failed")}
        status = "failed" if counts["failed"] else "done"
        return {"job_id": job_id, "status": status, "created": job["created"], "updated": job["created"],
                "progress": {"total": len(docs), **counts}, "documents": docs}

    def documents(self, status: str | None = None, offset: int = 0, limit: int = 50) -> dict:
        self._check("documents")
        rows = [{k: v for k, v in d.items() if k != "text"} for d in self.docs.values()
                if status is None or d["status"] == status]
        return {"documents": rows[offset:offset + limit], "total": len(rows), "offset": offset, "limit": limit}

    def document(self, doc_id: str) -> dict | None:
        self._check("document")
        return dict(self.docs[doc_id]) if doc_id in self.docs else None

    def delete(self, ids: list[str]) -> dict:
        self._check("delete")
        with self.lock:
            deleted = [i for i in ids if self.docs.pop(i, None) is not None]
        return {"deleted": deleted, "unknown": [i for i in ids if i not in deleted]}

    def retry_failed(self) -> dict | None:
        self._check("retry_failed")
        failed = [d for d in self.docs.values() if d["status"] == "failed"]
        if not failed:
            return None
        return self.add([{"id": d["id"], "text": d["text"].replace("FAIL", "ok")} for d in failed])

    def _ranked(self, query: str, top_k: int, where: dict | None) -> list[dict]:
        q = _words(query)
        docs = [d for d in self.docs.values() if d["status"] == "indexed"
                and all((d["metadata"] or {}).get(k) == v for k, v in (where or {}).items())]
        scored = sorted(docs, key=lambda d: (-len(q & _words(d["text"])), d["id"]))[:top_k]
        return [{"id": f"chunk-{d['id']}", "text": d["text"], "score": float(len(q & _words(d["text"]))),
                 "doc_ids": [d["id"]], "rank": r + 1} for r, d in enumerate(scored)]

    def retrieve(self, queries: list[str], *, top_k: int = 5, mode: str | None = None, explain: bool = False,
                 where: dict | None = None) -> list[dict]:
        self._check("retrieve")
        self.calls.append(("retrieve_args", queries, top_k, mode, explain, where))
        out = []
        for q in queries:
            r = {"query": q, "mode": mode or "hipporag2", "passages": self._ranked(q, top_k, where)}
            if explain:
                r["explanations"] = [{"passage_id": p["id"], "rank": p["rank"]} for p in r["passages"]]
            out.append(r)
        return out

    def answer(self, question: str, *, top_k: int = 5, mode: str | None = None, where: dict | None = None) -> dict:
        self._check("answer")
        passages = self._ranked(question, top_k, where)
        answer = passages[0]["text"].split()[0] if passages else "I do not know"
        return {"question": question, "answer": answer,
                "citations": [{"id": p["id"], "text": p["text"], "doc_ids": p["doc_ids"]} for p in passages[:1]],
                "passages": passages, "notes": []}

    def explain(self, query: str, passage_ids: list[str] | None = None, top: int = 5,
                where: dict | None = None) -> list[dict]:
        self._check("explain")
        ranked = self._ranked(query, top, where)
        ids = passage_ids or [p["id"] for p in ranked]
        return [{"passage_id": i, "query": query} for i in ids]

    def subgraph(self, query: str, top: int = 5, limit: int = 60) -> dict:
        self._check("subgraph")
        ranked = self._ranked(query, top, None)[:limit]
        nodes = [{"id": p["id"], "label": p["text"][:20], "kind": "passage", "score": p["score"]} for p in ranked]
        return {"nodes": nodes, "edges": []}

    def stats(self) -> dict:
        self._check("stats")
        by = {s: sum(d["status"] == s for d in self.docs.values()) for s in ("pending", "indexed", "failed")}
        return {"documents": by, "passages": by["indexed"], "extractor": "fake"}

    def close(self) -> None:
        self.closed = True


class FakeWorkspaces:
    """Named ``FakeMemory`` objects; the default workspace (None) always exists."""

    def __init__(self) -> None:
        self.memories: dict[str | None, FakeMemory] = {None: FakeMemory()}
        self.closed = False

    def get(self, name: str | None, *, create: bool) -> FakeMemory:
        if name is not None and not re.fullmatch(WORKSPACE_PATTERN.strip("^$"), name):
            raise ValueError(f"bad workspace name {name!r}")
        if name not in self.memories:
            if not create:
                raise KeyError(f"no workspace {name!r}")
            self.memories[name] = FakeMemory()
        return self.memories[name]

    def list(self) -> list[dict]:
        return [{"name": n, "documents": len(m.docs)} for n, m in self.memories.items() if n is not None]

    def delete(self, name: str) -> bool:
        mem = self.memories.pop(name, None)
        if mem is not None:
            mem.close()
        return mem is not None

    def close(self) -> None:
        self.closed = True
        for m in self.memories.values():
            m.close()


def make_client(workspaces: FakeWorkspaces | None = None, **settings):
    """A TestClient (not yet entered) over the app with fake workspaces; ``settings``: ServiceSettings fields.
    The MCP server and the web page are left out unless asked for."""
    from fastapi.testclient import TestClient

    from hippo_engine.service.app import create_app
    from hippo_engine.service.settings import ServiceSettings
    opts = {"save_dir": "unused", "mount_mcp": False, "mount_web": False, **settings}
    app = create_app(ServiceSettings(**opts), workspaces=workspaces or FakeWorkspaces())
    return TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1:8000")
