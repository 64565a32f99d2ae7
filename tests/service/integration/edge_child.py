"""A server process for the edge tests: ``hippo_engine.cli.serve.run_server`` (what ``hippo-engine serve``
runs: uvicorn with the service's protocol, timeouts, cap and log filters) on 127.0.0.1:PORT over the app
with the fake memory of tests/service/http_fakes.py, so that it starts in a second.

``--nofile N``: lower the process's file descriptor limit to N first (``ulimit -n N``). Settings the code
under test does not know are left out, and ``run_server`` is called the way it can be, so that the same
tests run (and fail for what they check) against an older engine."""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # tests/service: http_fakes


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--header-timeout", type=float, default=10.0)
    ap.add_argument("--body-timeout", type=float, default=30.0)
    ap.add_argument("--max-connections", type=int, default=200)
    ap.add_argument("--nofile", type=int, default=None)
    args = ap.parse_args()
    if args.nofile:
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    from http_fakes import FakeWorkspaces

    from hippo_engine.cli.serve import run_server
    from hippo_engine.service.app import create_app
    from hippo_engine.service.settings import ServiceSettings
    wanted = {"save_dir": "unused", "mount_mcp": False, "mount_web": False, "header_timeout_s": args.header_timeout,
              "body_timeout_s": args.body_timeout, "max_connections": args.max_connections}
    known = {f.name for f in dataclasses.fields(ServiceSettings)}
    settings = ServiceSettings(**{k: v for k, v in wanted.items() if k in known})
    app = create_app(settings, workspaces=FakeWorkspaces())
    extra = {"settings": settings} if "settings" in inspect.signature(run_server).parameters else {}
    return run_server("127.0.0.1", args.port, 1, "info", app=app, **extra)


if __name__ == "__main__":
    sys.exit(main())
