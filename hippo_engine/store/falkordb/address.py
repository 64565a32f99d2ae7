"""Where a FalkorDB server is: :class:`FalkorAddress`, from a URL or from the embedded server.

A running server is named by ``falkordb://[[user]:password@]host[:port][/graph]`` (port 6379 by
default; a password holding ``/ ? # @ :`` is percent-encoded); the embedded server
(:mod:`.server`) is reached on its unix socket. The password never shows: not in a message, not in
a ``repr``, not in :meth:`FalkorAddress.where` (URLs in messages pass through
:func:`hippo_engine.dsn.redact_dsn`). Graph names are checked up front (:func:`check_graph_name`).

Plain text and sockets: the ``falkordb`` client is imported only by :meth:`FalkorAddress.connect`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit

from hippo_engine.dsn import redact_dsn
from hippo_engine.errors import ConfigError
from hippo_engine.store.base import StoreError

INSTALL_HINT = "pip install 'hippo-engine[falkordb]'"
SCHEME = "falkordb"
DEFAULT_PORT = 6379
#: a graph name: a Redis key the engine can quote anywhere (letters, digits, '_' and '-', at most 63)
GRAPH_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,62}$")


class ServerError(StoreError):
    """A FalkorDB server could not be set up, started, reached or stopped."""


class ServerUnreachable(ServerError):
    """No FalkorDB server answers at an address (the message names it, and what to start)."""


class FalkorConfigError(StoreError, ConfigError):
    """A malformed ``falkordb://`` URL or graph name: a configuration error (exit status 2 on the
    command line) that is also a ``StoreError``."""


def check_graph_name(name: str) -> str:
    """``name`` if it can name an index's graph; else a configuration error naming it."""
    if not isinstance(name, str) or not GRAPH_NAME.match(name):
        raise FalkorConfigError(f"FalkorDB graph name {name!r}: use letters, digits, '_' and '-' (at most 63, "
                                "starting with a letter or '_')")
    return name


@dataclass(frozen=True)
class FalkorAddress:
    """A FalkorDB server: ``host``/``port`` over TCP or ``socket`` (a unix socket's path), the
    credentials, and the graph (None: not named yet). ``repr`` and messages never show the password."""

    host: str | None = None
    port: int = DEFAULT_PORT
    socket: Path | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    graph: str | None = None

    def __post_init__(self):
        if (self.host is None) == (self.socket is None):
            raise FalkorConfigError("a FalkorDB address names either a host or a unix socket")
        if self.graph is not None:
            check_graph_name(self.graph)

    def where(self) -> str:
        """The server's address for messages: ``unix socket <path>`` or ``host:port``."""
        if self.socket is not None:
            return f"unix socket {self.socket}"
        host = f"[{self.host}]" if self.host and ":" in self.host else self.host
        return f"{host}:{self.port}"

    def url(self, redacted: bool = True) -> str:
        """The ``falkordb://`` URL of a TCP address (the password as ``***`` unless ``redacted=False``)."""
        if self.socket is not None:
            raise FalkorConfigError(f"the FalkorDB server on {self.where()} has no falkordb:// URL (a unix socket)")
        from urllib.parse import quote
        auth = ""
        if self.password is not None:
            pw = "***" if redacted else quote(self.password, safe="")
            auth = f"{quote(self.username or '', safe='')}:{pw}@"
        return f"{SCHEME}://{auth}{self.where()}" + (f"/{self.graph}" if self.graph else "")

    def with_graph(self, graph: str) -> FalkorAddress:
        """This server with graph ``graph`` (checked)."""
        return replace(self, graph=check_graph_name(graph))

    def client_args(self, timeout: float = 10.0) -> dict:
        """Keyword arguments of ``falkordb.FalkorDB`` / ``redis.Redis`` for this server."""
        args: dict = {"password": self.password, "username": self.username or None,
                      "socket_timeout": timeout, "socket_connect_timeout": timeout}
        if self.socket is not None:
            args["unix_socket_path"] = str(self.socket)
        else:
            args.update(host=self.host, port=self.port)
        return args

    def connect(self, timeout: float = 10.0):
        """A ``falkordb.FalkorDB`` client of this server, checked with a ``PING`` (no retry here:
        the caller retries at connect if it wants to). Raises :class:`ServerUnreachable` naming the
        address, :class:`ServerError` where the client is not installed or the password is refused."""
        try:
            import falkordb
            import redis
        except ImportError:
            raise ServerError(f"the FalkorDB client is not installed; install it with: {INSTALL_HINT}") from None
        try:               # the client's constructor already talks to the server (it asks for its mode)
            db = falkordb.FalkorDB(**self.client_args(timeout))
            db.connection.ping()
        except redis.AuthenticationError:
            raise ServerError(f"the FalkorDB server at {self.where()} refused the password") from None
        except (redis.ConnectionError, redis.TimeoutError, OSError) as e:
            raise ServerUnreachable(
                f"no FalkorDB server answers at {self.where()} ({type(e).__name__}); start one there "
                "(redis-server --loadmodule <falkordb.so>) or leave the URL out to use the embedded server") from None
        return db


def parse_url(url: str) -> FalkorAddress:
    """The address a ``falkordb://[[user]:password@]host[:port][/graph]`` URL names; a
    :class:`FalkorConfigError` (the URL redacted) where it is not one."""
    shown = redact_dsn(url)
    parts = urlsplit(url)
    if parts.scheme != SCHEME:
        raise FalkorConfigError(f"{shown}: a FalkorDB URL starts with {SCHEME}://")
    if parts.query or parts.fragment:
        raise FalkorConfigError(f"{shown}: a FalkorDB URL takes no query or fragment "
                                f"({SCHEME}://[:password@]host:port/graph)")
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port == -1 or port == 0:
        raise FalkorConfigError(f"{shown}: name a host and a port from 1 to 65535 "
                                f"({SCHEME}://[:password@]host:port/graph)")
    graph = unquote(parts.path[1:]) if parts.path.startswith("/") else parts.path
    try:
        check_graph_name(graph) if graph else None
    except FalkorConfigError as e:
        raise FalkorConfigError(f"{shown}: {e}") from None
    return FalkorAddress(host=parts.hostname, port=port or DEFAULT_PORT,
                         username=unquote(parts.username) if parts.username else None,
                         password=unquote(parts.password) if parts.password is not None else None,
                         graph=graph or None)


__all__ = ["DEFAULT_PORT", "FalkorAddress", "FalkorConfigError", "INSTALL_HINT", "ServerError", "ServerUnreachable",
           "check_graph_name", "parse_url"]
