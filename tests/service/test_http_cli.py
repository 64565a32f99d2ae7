"""``hippo-engine serve``'s flags and settings (the real server: tests/service/integration/test_http_server.py)."""
import json
import os
from pathlib import Path

import pytest

from hippo_engine.cli import build_parser, main
from hippo_engine.cli import serve as cli_serve
from hippo_engine.service.settings import (
    ENV_ACCESS_KEY,
    ENV_SETTINGS,
    ENV_SETTINGS_FILE,
    ServiceSettings,
    private_settings_file,
)


def _args(*argv):
    return build_parser().parse_args(["serve", "--save-dir", "idx", *argv])


def test_defaults_are_safe():
    args = _args()
    s = cli_serve.build_settings(args, environ={})
    assert (args.host, args.port, args.workers) == ("127.0.0.1", 8000, 1)
    assert s.access_key is None and s.cors_origins == () and s.save_dir == "idx"


def test_the_access_key_comes_from_the_flag_or_the_environment_and_api_key_stays_the_llms():
    s = cli_serve.build_settings(_args("--api-key", "llm-key"), environ={ENV_ACCESS_KEY: "from-env"})
    assert s.access_key == "from-env" and s.rag_options["llm_api_key"] == "llm-key"
    s = cli_serve.build_settings(_args("--access-key", "flag"), environ={ENV_ACCESS_KEY: "from-env"})
    assert s.access_key == "flag"


def test_llm_storage_and_ranking_flags_reach_the_engine():
    args = _args("--storage", "postgres", "--llm-base-url", "http://127.0.0.1:9/v1", "--llm", "m",
                 "--extractor", "ner", "--no-filter", "--embedder", "e", "--index-batch", "8",
                 "--cors-origin", "http://127.0.0.1:3000", "--max-body-mb", "2", "--max-batch", "10")
    s = cli_serve.build_settings(args, environ={})
    assert s.rag_options["storage_backend"] == "postgres" and s.rag_options["llm_base_url"] == "http://127.0.0.1:9/v1"
    assert s.rag_options["llm_model_name"] == "m" and s.rag_options["extractor"] == "ner"
    assert s.rag_options["use_filter"] is False and s.rag_options["embedding_model_name"] == "e"
    assert s.memory_options == {"batch_size": 8} and s.cors_origins == ("http://127.0.0.1:3000",)
    assert s.max_body_bytes == 2 * 2 ** 20 and s.max_batch == 10


@pytest.mark.parametrize("argv", [["--port", "70000"], ["--port", "x"], ["--workers", "0"], ["--max-batch", "0"]])
def test_bad_flags_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as e:
        _args(*argv)
    assert e.value.code == 2


def _fake_serve(monkeypatch):
    """``serve``'s uvicorn replaced by a recorder of what it gets and of what is in the environment then."""
    import os
    seen = {}

    def fake_run(host, port, workers, log_level, app=None, *, settings=None):
        path = os.environ.get(ENV_SETTINGS_FILE)
        seen.update(host=host, port=port, workers=workers, app=app, settings=settings, path=path,
                    environ=dict(os.environ), file=None if path is None else Path(path).read_text(),
                    mode=None if path is None else (Path(path).stat().st_mode & 0o777,
                                                    Path(path).parent.stat().st_mode & 0o777),
                    loaded=None if path is None else ServiceSettings.from_env())   # what each worker does
        return 0

    monkeypatch.setattr(cli_serve, "run_server", fake_run)
    monkeypatch.setattr(cli_serve, "open_app", lambda settings, keep: "the app" if keep else None)
    for name in (ENV_ACCESS_KEY, ENV_SETTINGS, ENV_SETTINGS_FILE):    # restored after the test
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    return seen


def _secrets_in(environ: dict, *secrets: str) -> list[str]:
    return [k for k, v in environ.items() if any(s in v for s in secrets)]


def test_one_process_puts_no_secret_in_the_environment(monkeypatch, capsys):
    """Issue 37 (10): with one worker the settings (LLM key, DSN password) and the access key stay out of
    ``os.environ``, which every child inherits; a key given in the environment is taken out of it."""
    seen = _fake_serve(monkeypatch)
    monkeypatch.setenv(ENV_ACCESS_KEY, "env-secret-key")
    argv = ["serve", "--save-dir", "idx", "--api-key", "llm-secret", "--dsn", "postgresql://u:pw-secret@h/db"]
    assert main(argv) == 0
    assert seen["app"] == "the app" and seen["path"] is None and seen["settings"].access_key == "env-secret-key"
    assert _secrets_in(seen["environ"], "llm-secret", "pw-secret", "env-secret-key") == []
    assert ENV_SETTINGS not in seen["environ"] and ENV_ACCESS_KEY not in seen["environ"]


def test_workers_get_the_settings_from_a_private_file_removed_at_exit(monkeypatch, capsys):
    """Issue 37 (10): with --workers > 1 the settings and the key are in a 0600 file of a 0700 folder whose
    path alone is in the environment; the workers' loader reads it; both are gone afterwards."""
    seen = _fake_serve(monkeypatch)
    assert main(["serve", "--save-dir", "idx", "--workers", "3", "--host", "0.0.0.0", "--port", "0",
                 "--access-key", "key-secret", "--api-key", "llm-secret"]) == 0
    assert seen["workers"] == 3 and seen["host"] == "0.0.0.0" and seen["port"] == 0 and seen["app"] is None
    assert _secrets_in(seen["environ"], "llm-secret", "key-secret") == []
    assert seen["mode"] == (0o600, 0o700) and "key-secret" in seen["file"]
    loaded = seen["loaded"]
    assert loaded == seen["settings"] and loaded.access_key == "key-secret"
    assert loaded.rag_options["llm_api_key"] == "llm-secret"
    assert not Path(seen["path"]).parent.exists() and ENV_SETTINGS_FILE not in os.environ
    err = capsys.readouterr().err
    assert "without an access key" not in err and "--allowed-hosts" in err     # a wildcard bind's note
    main(["serve", "--save-dir", "idx", "--host", "0.0.0.0"])
    assert "without an access key" in capsys.readouterr().err


@pytest.mark.parametrize("key", [" lead", "trail ", "tab\t", "\nline"])
def test_a_key_with_whitespace_around_it_is_refused_at_startup(key, monkeypatch, capsys):
    """Issue 37 (11): HTTP drops the whitespace around a header value, so such a key never matches."""
    _fake_serve(monkeypatch)
    assert main(["serve", "--save-dir", "idx", "--access-key", key]) == 2
    assert "whitespace" in capsys.readouterr().err
    monkeypatch.setenv(ENV_ACCESS_KEY, key)
    assert main(["serve", "--save-dir", "idx"]) == 2
    with pytest.raises(ValueError, match="whitespace"):
        ServiceSettings("d", access_key=key)
    assert ServiceSettings("d", access_key="in side").access_key == "in side"


def test_a_bad_allowed_host_is_a_plain_error_before_anything_opens(monkeypatch, capsys):
    seen = _fake_serve(monkeypatch)
    monkeypatch.setattr(cli_serve, "open_app", lambda settings, keep: pytest.fail("nothing may open"))
    assert main(["serve", "--save-dir", "idx", "--allowed-hosts", "ok.example,http://x/"]) == 2
    assert "'http://x/' is not a host name" in capsys.readouterr().err and not seen
    s = cli_serve.build_settings(_args("--allowed-hosts", "a.example, b.example:8443", "--allowed-hosts", "*"), {})
    assert s.allowed_hosts == ("a.example", "b.example:8443", "*")


def test_the_settings_file_is_checked(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text("[1]")
    with pytest.raises(ValueError, match="does not hold"):
        ServiceSettings.from_env({ENV_SETTINGS_FILE: str(bad)})
    with pytest.raises(ValueError, match="cannot read"):
        ServiceSettings.from_env({ENV_SETTINGS_FILE: str(tmp_path / "nope.json")})
    env: dict = {}
    with private_settings_file(ServiceSettings("d", access_key="k"), env) as path:
        assert env == {ENV_SETTINGS_FILE: str(path)}
        with pytest.raises(FileExistsError):         # never reused, never followed through a link
            ServiceSettings("d").write_private(path)
    assert env == {} and not path.exists()


def test_a_bad_storage_server_is_a_plain_error_before_uvicorn_starts(tmp_path, capsys, monkeypatch):
    pytest.importorskip("psycopg", reason="the postgres extra")
    monkeypatch.setattr(cli_serve, "run_server", lambda *a, **k: pytest.fail("uvicorn must not start"))
    rc = main(["serve", "--save-dir", str(tmp_path / "m"), "--dsn", "postgresql://127.0.0.1:1/nope", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot connect to the PostgreSQL server" in err and "Traceback" not in err


def test_the_workers_socket_is_tcp_so_that_connections_get_tcp_nodelay():
    import asyncio
    import socket
    sock = cli_serve.tcp_socket("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP and sock.get_inheritable()

        async def accept_one():
            seen = {}

            async def handle(reader, writer):
                s = writer.get_extra_info("socket")
                seen["nodelay"] = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                writer.close()
            server = await asyncio.start_server(handle, sock=sock)
            _, w = await asyncio.open_connection(*sock.getsockname())
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.01)
            w.close()
            server.close()
            return seen
        assert asyncio.run(accept_one())["nodelay"] == 1
    finally:
        sock.close()
    with pytest.raises(OSError, match="cannot listen on"):
        taken = cli_serve.tcp_socket("127.0.0.1", 0)
        taken.listen()
        try:
            cli_serve.tcp_socket("127.0.0.1", taken.getsockname()[1]).close()
        finally:
            taken.close()


def test_settings_travel_as_json_without_the_key():
    s = ServiceSettings("d", rag_options={"extractor": "ner"}, access_key="k", cors_origins=("http://a",))
    text = s.to_json()
    assert '"k"' not in text and "access_key" not in text
    assert ServiceSettings.from_env({ENV_SETTINGS: text, ENV_ACCESS_KEY: "k"}) == s
    with pytest.raises(ValueError, match="unknown settings: nope"):
        ServiceSettings.from_json(json.dumps({"save_dir": "d", "nope": 1}))
    with pytest.raises(ValueError, match="not set"):
        ServiceSettings.from_env({})
    with pytest.raises(ValueError, match="max_batch"):
        ServiceSettings("d", max_batch=0)


def test_loopback_hosts():
    assert cli_serve.is_loopback("127.0.0.1") and cli_serve.is_loopback("::1") and cli_serve.is_loopback("localhost")
    assert not cli_serve.is_loopback("0.0.0.0") and not cli_serve.is_loopback("example.org")


def test_the_work_and_workspace_limits_reach_the_settings_and_the_workspaces(tmp_path):
    from dataclasses import replace

    from hippo_engine.service.app import open_workspaces
    args = _args("--max-answers", "2", "--max-connections", "50", "--max-workspaces", "7",
                 "--max-open-workspaces", "3", "--workspace-idle", "12.5")
    s = cli_serve.build_settings(args, environ={})
    assert (s.max_answers, s.max_connections, s.max_workspaces, s.max_open_workspaces, s.workspace_idle_s) == \
        (2, 50, 7, 3, 12.5)
    defaults = cli_serve.build_settings(_args(), environ={})
    assert (defaults.max_answers, defaults.max_workspaces, defaults.max_open_workspaces,
            defaults.workspace_idle_s) == (4, 1000, 16, 300.0)
    for bad in ("0", "-1", "inf", "x"):
        with pytest.raises(SystemExit):
            _args("--workspace-idle", bad)
    with open_workspaces(replace(s, save_dir=str(tmp_path))) as ws:       # what serve opens
        assert (ws.max_workspaces, ws.max_open, ws.idle_s) == (7, 3, 12.5)
