"""What one ``hippo-engine serve`` process needs to build its app: :class:`ServiceSettings`.

The settings hold secrets (the LLM's key, a DSN's password, the access key), so they never go into
the environment, which every child process inherits (the embedded PostgreSQL server, ...). With one
process ``serve`` builds the app itself. Its worker processes (``--workers N`` starts the app from an
import string, :func:`hippo_engine.service.app.app_from_env`) read them from a file readable by its
owner only (0600, in a private folder, 0700) whose path alone is in :data:`ENV_SETTINGS_FILE`;
:func:`private_settings_file` writes it and removes it when the server stops. A process started by
hand (``uvicorn --factory``) may still give the JSON in :data:`ENV_SETTINGS` and the key in
:data:`ENV_ACCESS_KEY`. Light to import: no FastAPI, no engine.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

#: The environment variable holding the settings (JSON) of the worker processes.
ENV_SETTINGS = "HIPPO_ENGINE_SERVE_SETTINGS"
#: The environment variable holding the access key (``X-API-Key``) when ``--access-key`` is not given.
ENV_ACCESS_KEY = "HIPPO_ENGINE_ACCESS_KEY"
#: The environment variable holding the path of the worker processes' settings file.
ENV_SETTINGS_FILE = "HIPPO_ENGINE_SERVE_SETTINGS_FILE"


@dataclass(frozen=True)
class ServiceSettings:
    """One server's configuration. ``rag_options`` are the ``HippoRAG`` keyword arguments of every
    workspace (models, storage, extractor, LLM); ``memory_options`` those of each ``Memory``
    (ingestion ``batch_size``; ``batch_window_ms``, how long a retrieve waits for concurrent ones to run
    with it as one batch, :mod:`hippo_engine.service.batching`: 0 turns it off, default
    :data:`~hippo_engine.service.batching.DEFAULT_WINDOW_MS`; ...). The limits answer 413 (too big a
    body or batch) or 422 (too long a query, too large a top_k) with a message that names the limit."""

    save_dir: str
    rag_options: dict[str, Any] = field(default_factory=dict)
    memory_options: dict[str, Any] = field(default_factory=dict)
    host: str = "127.0.0.1"
    access_key: str | None = None
    #: bytes in one request body (Content-Length or counted as it streams)
    max_body_bytes: int = 16 * 2 ** 20
    #: documents in one POST /documents (or ids in one batch delete)
    max_batch: int = 1000
    #: queries in one POST /retrieve
    max_queries: int = 64
    #: characters in one query, question or passage-id list entry
    max_query_chars: int = 4000
    #: the largest top_k (and explain's top)
    max_top_k: int = 200
    #: origins allowed by CORS; empty: no CORS headers at all (the default)
    cors_origins: tuple[str, ...] = ()
    #: mount the MCP server at /mcp and the web page at / when their modules are installed
    mount_mcp: bool = True
    mount_web: bool = True
    #: Host header names accepted besides the loopback names and ``host`` itself (a DNS name, a reverse
    #: proxy's name; ``name`` or ``name:port``); every other Host is refused (400), on every route and /mcp
    allowed_hosts: tuple[str, ...] = ()
    #: characters in one document text (every door: REST, MCP over HTTP and stdio)
    max_text_chars: int = 1_000_000
    #: answers (reader LLM calls) in flight at once; one more is refused (503, Retry-After)
    max_answers: int = 4
    #: connections and requests the server holds at once (uvicorn's limit_concurrency; more: 503)
    max_connections: int = 200
    #: seconds a client has to send a request's headers, and at most between two pieces of its body
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    #: named workspaces that may exist; creating one more is refused (409)
    max_workspaces: int = 1000
    #: workspaces open at once; the least recently used idle one is closed to open another (all busy: 503)
    max_open_workspaces: int = 16
    #: seconds after its last request when an open workspace is closed (reopened on its next request)
    workspace_idle_s: float = 300.0

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_batch", "max_queries", "max_query_chars", "max_top_k", "max_text_chars",
                     "max_answers", "max_connections", "max_workspaces", "max_open_workspaces"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ServiceSettings.{name} must be a positive whole number, got {value!r}")
        for name in ("header_timeout_s", "body_timeout_s", "workspace_idle_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
                raise ValueError(f"ServiceSettings.{name} must be a positive number of seconds, got {value!r}")
        if self.access_key is not None and not self.access_key.strip():
            raise ValueError("the access key must not be empty")
        if self.access_key is not None and self.access_key != self.access_key.strip():
            raise ValueError("the access key starts or ends with whitespace, which no client can send (HTTP "
                             "drops it around a header's value): remove it")
        _check_batch_window(self.memory_options)
        object.__setattr__(self, "cors_origins", tuple(self.cors_origins))
        object.__setattr__(self, "allowed_hosts", tuple(self.allowed_hosts))

    def to_json(self) -> str:
        """The settings as JSON, without the access key (see :data:`ENV_ACCESS_KEY`)."""
        data = asdict(self)
        data.pop("access_key")
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str, *, access_key: str | None = None) -> ServiceSettings:
        """Settings from :meth:`to_json`'s output; unknown keys are an error that names them."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{ENV_SETTINGS} is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{ENV_SETTINGS} must hold a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)} - {"access_key"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{ENV_SETTINGS} has unknown settings: {', '.join(unknown)}")
        return cls(**data, access_key=access_key)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServiceSettings:
        """The settings a worker process was started with: the file named by :data:`ENV_SETTINGS_FILE`,
        else :data:`ENV_SETTINGS` and :data:`ENV_ACCESS_KEY`."""
        env = os.environ if environ is None else environ
        if env.get(ENV_SETTINGS_FILE):
            return cls.from_file(Path(env[ENV_SETTINGS_FILE]))
        text = env.get(ENV_SETTINGS)
        if not text:
            raise ValueError(f"{ENV_SETTINGS_FILE} is not set: start the server with `hippo-engine serve`")
        return cls.from_json(text, access_key=env.get(ENV_ACCESS_KEY) or None)

    @classmethod
    def from_file(cls, path: Path) -> ServiceSettings:
        """Settings from :meth:`write_private`'s file (the access key included)."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read the server's settings file {path}: {e}") from None
        if not isinstance(data, dict) or not isinstance(data.get("settings"), dict):
            raise ValueError(f"the server's settings file {path} does not hold its settings")
        return cls.from_json(json.dumps(data["settings"]), access_key=data.get("access_key"))

    def write_private(self, path: Path) -> None:
        """Write the settings, the access key included, to a new file readable by its owner only (0600)."""
        text = json.dumps({"settings": json.loads(self.to_json()), "access_key": self.access_key})
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)

    def with_access_key(self, key: str | None) -> ServiceSettings:
        """A copy with another access key."""
        return replace(self, access_key=key)


def _check_batch_window(memory_options: dict[str, Any]) -> None:
    """A ``batch_window_ms`` in ``memory_options`` must be a non-negative number of milliseconds (ValueError)."""
    window = memory_options.get("batch_window_ms", 0)
    if isinstance(window, bool) or not isinstance(window, int | float) or not 0 <= window < float("inf"):
        raise ValueError(f"the batch window must be a non-negative number of milliseconds, got {window!r}")


@contextmanager
def private_settings_file(settings: ServiceSettings, environ: dict[str, str] | None = None) -> Iterator[Path]:
    """The settings in a file for worker processes: a private folder (0700) holding the file (0600),
    its path in :data:`ENV_SETTINGS_FILE` of ``environ`` (default ``os.environ``, which the workers
    inherit) while the block runs; afterwards the variable, the file and the folder are gone."""
    env = os.environ if environ is None else environ
    folder = Path(tempfile.mkdtemp(prefix="hippo-engine-serve-"))
    try:
        path = folder / "settings.json"
        settings.write_private(path)
        env[ENV_SETTINGS_FILE] = str(path)
        yield path
    finally:
        env.pop(ENV_SETTINGS_FILE, None)
        shutil.rmtree(folder, ignore_errors=True)
