"""Issue 37 (10): the embedded PostgreSQL server (run as ``nobody`` when started by root) does not inherit
the secrets of the process that starts it: ``hippo-engine serve``'s settings and access key, the LLM's key,
and other key/token/password variables are not in its ``/proc/<pid>/environ``."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from hippo_engine.store.postgres.server import EmbeddedPostgres  # noqa: E402
from hippo_engine.store.postgres.serverfiles import server_env  # noqa: E402

SECRETS = {"HIPPO_ENGINE_SERVE_SETTINGS": '{"rag_options": {"llm_api_key": "llm-secret-1"}}',
           "HIPPO_ENGINE_SERVE_SETTINGS_FILE": "/tmp/secret-path-2", "HIPPO_ENGINE_ACCESS_KEY": "access-secret-3",
           "OPENAI_API_KEY": "openai-secret-4", "HF_TOKEN": "hf-secret-5", "MY_SERVICE_PASSWORD": "pw-secret-6",
           "AWS_SECRET_ACCESS_KEY": "aws-secret-7", "PGPASSWORD": "pg-secret-8"}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/environ")
def test_the_server_process_gets_none_of_the_parents_secrets(pg_dirs, monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    data = pg_dirs() / "pg"
    server = EmbeddedPostgres(data)
    server.start()
    try:
        pid = int((data / "postmaster.pid").read_text().splitlines()[0])
        env = _environ(pid)
    finally:
        server.stop(force=True, mode="immediate")
    assert env.get("LC_ALL") == "C" and "PATH" in env            # what the server needs is there
    leaked = {k: v for k, v in env.items() if k in SECRETS or any(s in v for s in SECRETS.values())}
    assert leaked == {}, leaked


def test_server_env_keeps_what_a_server_needs():
    env = server_env({"PATH": "/bin", "LD_LIBRARY_PATH": "/lib", "TZ": "UTC", "HOME": "/root", "TMPDIR": "/t",
                      "MONKEY": "m", "KEYBOARD": "k", **SECRETS})
    assert env == {"PATH": "/bin", "LD_LIBRARY_PATH": "/lib", "TZ": "UTC", "HOME": "/root", "TMPDIR": "/t",
                   "MONKEY": "m", "KEYBOARD": "k", "LC_ALL": "C", "LANG": "C"}
