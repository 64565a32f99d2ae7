"""The ``Host`` and ``Origin`` checks of every route (the REST API, the web page's files, ``/docs``,
``/openapi.json``, ``/health`` and ``/mcp``): :class:`HostGuard`, an ASGI middleware in front of the app.

* **Host** (against DNS rebinding: a hostile page whose name is made to resolve to this machine
  sends its own name as ``Host``). Accepted, each with or without a port: ``localhost`` and every
  loopback address (``127.x.y.z``, ``[::1]``), the address the server binds (``--host``), and the
  names of ``--allowed-hosts`` (``name`` any port, ``name:port`` that port only). A wildcard bind
  (``0.0.0.0``, ``::``) also accepts any IP address (a page cannot rebind an address, only a name)
  and this machine's host name (``socket.gethostname()``, and ``<it>.local``): the LAN reaches the
  server by address or by machine name, and other names need ``--allowed-hosts``. ``*`` in
  ``--allowed-hosts`` accepts any Host (a reverse proxy in front does the checking). A request
  without a Host header (HTTP/1.0), or with several, is refused too unless ``*``. Refused: 400.
* **Origin** (a browser page of another site): a request to ``/mcp`` (any method) or any other
  request but GET/HEAD that carries an ``Origin`` header needs that origin to be this server's own
  (same host and port as the request's Host, e.g. the web page at ``/``), a name of
  ``--allowed-hosts`` (the public name behind a proxy that rewrites Host), or a CORS origin
  (``--cors-origin``). ``Origin: null`` (a sandboxed or local file page) is foreign. Refused: 403.
  ``*`` in ``--allowed-hosts`` does not turn this check off.

Refusals are the service's JSON errors. The MCP SDK's own Host/Origin check (loopback names with a
port only, plain-text 421/403) is switched off behind this guard
(:func:`hippo_engine.service.mcp_server.mcp_http`, ``host_checked``).
"""
from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from hippo_engine.service.errors import error_response

#: binds that listen on every address of the machine
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
#: methods that read only (a cross-site GET cannot read the answer without CORS)
SAFE_METHODS = frozenset({"GET", "HEAD"})
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
SHOWN = 80


def split_host(value: str) -> tuple[str, int | None] | None:
    """``name``, ``name:port``, ``[v6]`` or ``[v6]:port`` -> (the name in lower case, without brackets or a
    trailing dot; the port or None); None if it is not a host."""
    value = value.strip().lower()
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    elif value.count(":") > 1:               # a bare IPv6 address
        name, port_text = value, None
    else:
        name, _, port_text = value.partition(":")
        port_text = port_text if ":" in value else None
    name = name.rstrip(".")
    if not name or any(c in name for c in "/@?#\\ \t"):
        return None
    if port_text is None:
        return name, None
    if not port_text.isdigit() or int(port_text) > 65535:
        return None
    return name, int(port_text)


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


def is_loopback_name(name: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    ip = _ip(name)
    return name == "localhost" or (ip is not None and ip.is_loopback)


def is_wildcard(bind: str) -> bool:
    """Whether ``bind`` is every address of the machine (0.0.0.0, ::)."""
    return bind.strip("[]") in WILDCARD_BINDS


def machine_names() -> set[str]:
    """This machine's host name, and its mDNS name (no lookup: nothing leaves the machine)."""
    name = socket.gethostname().lower().rstrip(".")
    return {name, f"{name.split('.')[0]}.local"} if name else set()


@dataclass(frozen=True)
class HostPolicy:
    """Which Host and Origin headers a server accepts (see the module docstring)."""

    #: (name, port or None for any port) accepted as Host and as an Origin's host
    named: frozenset[tuple[str, int | None]] = frozenset()
    #: further names accepted as Host (any port): the bind address, the machine's names
    bound: frozenset[str] = frozenset()
    any_host: bool = False
    any_ip: bool = False
    cors: frozenset[str] = frozenset()

    @classmethod
    def build(cls, bind: str, allowed_hosts: Iterable[str] = (), cors_origins: Iterable[str] = ()) -> HostPolicy:
        """The policy of a server bound to ``bind`` (``--host``) with ``--allowed-hosts``/``--cors-origin``."""
        entries = [e.strip() for e in allowed_hosts if e.strip()]
        named = set()
        for entry in entries:
            if entry != "*":
                parsed = split_host(entry)
                if parsed is None:
                    raise ValueError(f"--allowed-hosts: {entry!r} is not a host name (name or name:port)")
                named.add(parsed)
        wildcard = is_wildcard(bind)
        bound = {bind.strip("[]").lower().rstrip(".")} | (machine_names() if wildcard else set())
        return cls(named=frozenset(named), bound=frozenset(bound - {""}), any_host="*" in entries,
                   any_ip=wildcard, cors=frozenset(o.strip().rstrip("/") for o in cors_origins))

    def host_ok(self, value: str | None) -> bool:
        """Whether a Host header value is one of this server's names."""
        if self.any_host:
            return True
        parsed = split_host(value) if value is not None else None
        if parsed is None:
            return False
        name, port = parsed
        return (is_loopback_name(name) or name in self.bound or (self.any_ip and _ip(name) is not None)
                or self._named(name, port))

    def _named(self, name: str, port: int | None) -> bool:
        return (name, None) in self.named or (port is not None and (name, port) in self.named)

    def origin_ok(self, origin: str, host: str | None) -> bool:
        """Whether a request from a page at ``origin`` may reach a route (the request's Host: ``host``)."""
        origin = origin.strip()
        if "*" in self.cors or origin.rstrip("/") in self.cors:
            return True
        try:
            parts = urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme not in DEFAULT_PORTS or not parts.netloc or "@" in parts.netloc:
            return False
        seen = split_host(parts.netloc)
        if seen is None:
            return False
        name, port = seen
        if self._named(name, port) or self._named(name, DEFAULT_PORTS[parts.scheme]):
            return True
        own = split_host(host) if host else None
        return own is not None and own[0] == name and _same_port(own[1], port, DEFAULT_PORTS[parts.scheme])


def _same_port(host_port: int | None, origin_port: int | None, default: int) -> bool:
    """Ports of a Host and an Origin, an absent one being the origin scheme's default (a proxy may end TLS)."""
    return (host_port or default) == (origin_port or default)


def _headers(scope: Scope, name: bytes) -> list[str]:
    return [v.decode("latin-1") for k, v in scope.get("headers") or () if k == name]


class HostGuard:
    """ASGI middleware: a request reaches ``app`` only with an accepted Host (400 JSON otherwise) and,
    where it applies, an accepted Origin (403 JSON); see the module docstring."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app, self.policy = app, policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts = _headers(scope, b"host")
        host = hosts[0] if len(hosts) == 1 else None
        if not self.policy.any_host and (host is None or not self.policy.host_ok(host)):
            shown = "no Host header" if not hosts else f"the Host header {', '.join(hosts)[:SHOWN]!r}"
            await error_response(400, f"{shown} is not a name of this server (a guard against DNS rebinding); "
                                      "a name it should answer to can be allowed with serve --allowed-hosts",
                                 headers={"Connection": "close"})(scope, receive, send)
            return
        origins = _headers(scope, b"origin")
        if origins and self._origin_checked(scope) and not all(self.policy.origin_ok(o, host) for o in origins):
            await error_response(403, f"requests from the page at {origins[0][:SHOWN]!r} are not allowed here: "
                                      "a page of another site (allow its origin with serve --cors-origin)",
                                 headers={"Connection": "close"})(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _origin_checked(scope: Scope) -> bool:
        path = scope.get("path", "")
        return scope["type"] == "websocket" or path == "/mcp" or path.startswith("/mcp/") \
            or scope.get("method", "GET") not in SAFE_METHODS
