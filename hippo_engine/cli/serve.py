"""``hippo-engine serve``: the memory of an index folder over HTTP (FastAPI + uvicorn).

JSON API with its OpenAPI schema (``/openapi.json``, described at ``/docs``), named workspaces under
``/w/{name}/``, the web page at ``/`` and the MCP server at ``/mcp``. Binds 127.0.0.1 unless told
otherwise; with an access key (``--access-key`` or the environment variable
``HIPPO_ENGINE_ACCESS_KEY``) every route but ``/health`` needs it in the ``X-API-Key`` header.
``--api-key`` keeps meaning the LLM server's key, as in the other commands, whose storage, LLM and
ranking flags work here too. Ctrl-C (or SIGTERM) stops gracefully: requests in flight finish, then
each memory's indexing finishes its current batch. Light to import (uvicorn and the engine load
when the command runs).

The network edge: every route checks ``Host`` (``--allowed-hosts``) and ``Origin``
(:mod:`hippo_engine.service.hosts`); a connection gets ``header_timeout_s`` for each request head and
the app ``body_timeout_s`` between two pieces of a body (408); ``--max-connections`` caps what is held
at once (:mod:`hippo_engine.service.edge`); the log never holds a key sent in a query string and
floods of one line are throttled (:mod:`hippo_engine.service.logfilters`). Secrets stay out of the
environment: one process needs none there, several workers read a private file
(:func:`~hippo_engine.service.settings.private_settings_file`), and the access key read from
``HIPPO_ENGINE_ACCESS_KEY`` is removed from it, so that no child process inherits them.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
from typing import Any

from hippo_engine.cli import common
from hippo_engine.service.batching import DEFAULT_WINDOW_MS
from hippo_engine.service.settings import ENV_ACCESS_KEY, ServiceSettings, private_settings_file
from hippo_engine.system import usable_cpus

#: seconds uvicorn waits for requests in flight at shutdown
GRACEFUL_S = 30
APP_FACTORY = "hippo_engine.service.app:app_from_env"


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def add_parser(sub) -> None:
    """Register ``serve``."""
    sp: argparse.ArgumentParser = sub.add_parser(
        "serve", help="serve the memory over HTTP: JSON API (OpenAPI at /docs), workspaces, web page, MCP at /mcp",
        description="Serve an index folder as long-term memory over HTTP: add documents (indexed in the "
                    "background), retrieve, answer with citations, explain. The index is created on first use.")
    sp.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    sp.add_argument("--port", type=_port, default=8000, help="port to listen on (default 8000; 0: any free port)")
    sp.add_argument("--workers", type=common.positive, default=1, metavar="N",
                    help="server processes (default 1); they share the index and its indexing queue, but each "
                         "holds its own models and graph in memory and the machine's cores are split between "
                         "them. One process batching concurrent queries (--batch-window-ms) is the fastest on a "
                         "few cores; several pay on many cores, or with --storage postgres under mostly writes")
    sp.add_argument("--batch-window-ms", type=_milliseconds, default=None, metavar="MS",
                    help=f"how long a retrieve (POST /retrieve, MCP recall) waits for concurrent ones with the same "
                         f"options to run with it as one batch, each still getting its own answer (default "
                         f"{DEFAULT_WINDOW_MS:g}; 0: each runs alone); /stats shows the batches under 'batching'")
    sp.add_argument("--access-key", default=None, metavar="KEY",
                    help=f"require this key in the X-API-Key header on every route but /health (default: env "
                         f"{ENV_ACCESS_KEY}; none: no key needed)")
    sp.add_argument("--cors-origin", action="append", default=None, metavar="ORIGIN",
                    help="allow browser pages from this origin (repeatable; default: CORS off)")
    sp.add_argument("--max-body-mb", type=common.positive, default=16, metavar="MB",
                    help="largest request body in MiB (default 16; larger: 413)")
    sp.add_argument("--max-batch", type=common.positive, default=1000, metavar="N",
                    help="most documents per POST /documents (default 1000; more: 413)")
    sp.add_argument("--index-batch", type=common.positive, default=None, metavar="N",
                    help="documents indexed per batch by the background indexer (default 32)")
    sp.add_argument("--allowed-hosts", action="append", default=None, metavar="NAMES",
                    help="Host header names to accept besides this machine's loopback names and --host (comma-"
                         "separated, repeatable; e.g. the name a reverse proxy forwards); others get 400")
    sp.add_argument("--max-answers", type=common.positive, default=4, metavar="N",
                    help="answers (reader LLM calls) in flight at once (default 4; more: 503 with Retry-After)")
    sp.add_argument("--max-connections", type=common.positive, default=200, metavar="N",
                    help="connections and requests held at once (default 200; more: 503)")
    sp.add_argument("--max-workspaces", type=common.positive, default=1000, metavar="N",
                    help="named workspaces that may exist (default 1000; creating more: 409)")
    sp.add_argument("--max-open-workspaces", type=common.positive, default=16, metavar="N",
                    help="workspaces open at once (default 16): the least recently used idle one is closed to "
                         "open another and reopened when asked for again")
    sp.add_argument("--workspace-idle", type=_seconds, default=300.0, metavar="SECONDS",
                    help="close a workspace this long after its last request (default 300; reopened on its next)")
    common.ranking_flags(sp)
    common.shared_flags(sp, creates=True)
    sp.set_defaults(func=cmd_serve)


def build_settings(args, environ: dict[str, str] | None = None) -> ServiceSettings:
    """The server's settings from the command's flags (the access key from the flag or the environment)."""
    env = os.environ if environ is None else environ
    memory: dict[str, Any] = {}
    if args.index_batch is not None:
        memory["batch_size"] = args.index_batch
    if args.batch_window_ms is not None:
        memory["batch_window_ms"] = args.batch_window_ms
    rag = worker_share(common.rag_options(args), args.workers)
    return ServiceSettings(save_dir=str(args.save_dir), rag_options=rag, memory_options=memory, host=args.host,
                           access_key=args.access_key or env.get(ENV_ACCESS_KEY) or None,
                           max_body_bytes=args.max_body_mb * 2 ** 20, max_batch=args.max_batch,
                           cors_origins=tuple(args.cors_origin or ()), allowed_hosts=_names(args.allowed_hosts),
                           max_answers=args.max_answers, max_connections=args.max_connections,
                           max_workspaces=args.max_workspaces, max_open_workspaces=args.max_open_workspaces,
                           workspace_idle_s=args.workspace_idle)


def worker_share(rag_options: dict[str, Any], workers: int, cpus: int | None = None) -> dict[str, Any]:
    """The engine options of each of ``workers`` server processes: with several, each encoder runs on its share
    of the usable cores (``embedding_num_workers``: cores / workers, at least 2, which keeps the encoder on
    one torch thread per forward pass, whose vectors do not depend on the batch) instead of all of them."""
    if workers <= 1:
        return rag_options
    share = max(2, (cpus or usable_cpus()) // workers)
    return {**rag_options, "embedding_num_workers": share}


def _milliseconds(text: str) -> float:
    """argparse type: a non-negative finite number of milliseconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or a positive number of milliseconds, got {text}")
    return value


def _seconds(text: str) -> float:
    """argparse type: a positive finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _names(values: list[str] | None) -> tuple[str, ...]:
    """The names of repeated, comma-separated ``--allowed-hosts`` flags."""
    return tuple(n.strip() for v in values or () for n in v.split(",") if n.strip())


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_serve(args) -> int:
    """Run uvicorn until Ctrl-C / SIGTERM (each worker builds the app from the environment)."""
    try:
        import uvicorn  # noqa: F401

        import hippo_engine.service.app  # noqa: F401  (the server extra is installed)
    except ImportError as e:
        raise RuntimeError(f"serve needs the server extra: pip install 'hippo-engine[server]' ({e})") from e
    settings = build_settings(args)
    os.environ.pop(ENV_ACCESS_KEY, None)        # read once: no child process inherits it
    _warn_about_exposure(settings)
    level = "warning" if args.quiet else "info"
    if args.workers == 1:                       # nothing in the environment: this process builds the app
        app = open_app(settings, keep=True)
        return run_server(args.host, args.port, 1, level, app=app, settings=settings)
    open_app(settings, keep=False)
    with private_settings_file(settings):       # the workers read it; removed when they have stopped
        return run_server(args.host, args.port, args.workers, level, settings=settings)


def _warn_about_exposure(settings: ServiceSettings) -> None:
    """Warnings on stderr for a server reachable from other machines (a bad ``--allowed-hosts`` entry:
    ValueError, before anything is opened)."""
    from hippo_engine.service.hosts import HostPolicy, is_wildcard
    HostPolicy.build(settings.host, settings.allowed_hosts, settings.cors_origins)
    if not is_loopback(settings.host) and settings.access_key is None:
        print(f"hippo-engine: warning: serving on {settings.host} without an access key: anyone who can reach "
              f"this port can read and change the memory (set --access-key or {ENV_ACCESS_KEY})", file=sys.stderr)
    if is_wildcard(settings.host) and not settings.allowed_hosts:
        print(f"hippo-engine: note: serving on {settings.host}: requests must name this server by an IP address, "
              "localhost or this machine's host name in their Host header; other names (a DNS name, a proxy's) "
              "get 400 until listed in --allowed-hosts ('*': any, when a proxy in front checks them)",
              file=sys.stderr)


def open_app(settings: ServiceSettings, *, keep: bool) -> Any:
    """Open the default workspace here, so that a bad folder, storage or server fails now with a plain
    message (in a worker's startup it would be a traceback in the log). ``keep``: return the app over it
    (one process serves it); otherwise close it again (each worker opens its own) and return None."""
    from hippo_engine.service.app import create_app, open_workspaces
    ws = open_workspaces(settings)
    try:
        ws.get(None, create=True)
    except BaseException:
        ws.close()
        raise
    if not keep:
        ws.close()
        return None
    return create_app(settings, workspaces=ws, preload=False)


def tcp_socket(host: str, port: int) -> socket.socket:
    """A listening socket for the worker processes, made as a TCP socket (protocol IPPROTO_TCP, which
    asyncio needs to set TCP_NODELAY on each connection: without it, a response written in two parts
    waits for the client's delayed ACK, 40 ms on Linux, on every request)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def run_server(host: str, port: int, workers: int, log_level: str, app: Any = None, *,
               settings: ServiceSettings | None = None) -> int:
    """Run uvicorn until stopped: on ``app`` (one process), else on the app factory (each worker builds
    its app from its settings file, see :func:`cmd_serve`); 3 if the app failed to start (one process).
    With several workers, the socket is made here (:func:`tcp_socket`) and uvicorn's supervisor starts
    them. ``settings`` (default: ``app.state.settings``, else the defaults) give the header timeout and
    the connection cap (:class:`~hippo_engine.service.edge.EdgeConfig`)."""
    import logging

    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from hippo_engine.service.edge import EdgeConfig, connection_cap
    from hippo_engine.service.logfilters import install_log_filters
    settings = settings or getattr(getattr(app, "state", None), "settings", None)
    header_s = settings.header_timeout_s if settings else ServiceSettings.header_timeout_s
    cap = connection_cap(settings.max_connections if settings else ServiceSettings.max_connections)
    target = app if app is not None and workers == 1 else APP_FACTORY
    config = EdgeConfig(target, factory=target == APP_FACTORY, host=host, port=port, workers=workers,
                        log_level=log_level, timeout_graceful_shutdown=GRACEFUL_S, server_header=False,
                        header_timeout_s=header_s, limit_concurrency=cap)
    install_log_filters()               # after the Config, which set up uvicorn's loggers
    server = uvicorn.Server(config)
    try:
        if workers == 1:            # uvicorn binds the address itself (a TCP socket: TCP_NODELAY is set)
            server.run()
            return 0 if server.started else 3
        sock = tcp_socket(host, port)
        logging.getLogger("uvicorn.error").info("Uvicorn running on http://%s:%d with %d workers (Press CTRL+C to "
                                                "quit)", host, sock.getsockname()[1], workers)
        Multiprocess(config, sockets=[sock]).run()
    except KeyboardInterrupt:       # Ctrl-C, after the graceful shutdown: the normal way to stop
        pass
    return 0
