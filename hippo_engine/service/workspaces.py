"""Many isolated memories on one server: :class:`Workspaces`.

The default workspace is the index in ``root`` itself; a named one is the index in
``root/workspaces/<name>`` (names: :data:`NAME`), made on its first write. With SQLite each folder holds its
own database file; with PostgreSQL each folder's index lives in its own schema (the store's identity gives a
new folder a schema of its own: ``hippo_<name>_<hash of the folder>``), on the server of the configured DSN
or, without one, on the embedded server of the default workspace (``root/postgres``). A workspace's data is
reached only through its folder, so no request reaches another workspace's data.

Each open workspace is a :class:`~hippo_engine.service.memory.Memory` with two ``HippoRAG`` objects on its
index (queries, and the ingestion worker's writes) sharing one encoder per server
(:class:`~.workspace_parts.SharedEncoder`: loaded once, one ``encode`` at a time).

Lifecycle. A request holds a :class:`Lease` on the workspace it uses (:meth:`Workspaces.lease`). At most
``max_workspaces`` named workspaces exist (one more: :class:`WorkspaceLimitError`); at most ``max_open`` named
ones are open: opening another closes the least recently used idle one (no lease, nothing queued or being
indexed), and when every open one is busy it is refused (:class:`WorkspacesBusyError`, try again). A named
workspace unused for ``idle_s`` seconds is closed by a sweeper thread; a closed workspace opens again on its
next request. The default workspace stays open.

Locks: the global lock guards the tables only and is never held across a long call (opening or closing a
``HippoRAG``, waiting for a batch, dropping a schema): each name has a lock of its own for its opening and
deletion, so a workspace that opens, closes or is deleted never holds up requests to another. Deletion marks
the workspace first (new requests get ``KeyError``: 404), then closes it and drops its data.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter, OrderedDict
from pathlib import Path

from hippo_engine.service.memory import Memory
from hippo_engine.service.workspace_parts import (
    BUSY_RETRY_S,
    Lease,
    SharedEncoder,
    WorkspaceLimitError,
    WorkspacesBusyError,
    count_closed,
    share_encoder,
    storage_options,
)
from hippo_engine.store.registry import backend_for

logger = logging.getLogger(__name__)

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
DEFAULT = "default"
FOLDER = "workspaces"
#: seconds between two looks for an idle workspace to close while every open one is busy
BUSY_POLL_S = 0.05


def check_name(name: str | None) -> str:
    """A workspace name (``None`` and ``"default"`` are the default workspace); ValueError for others."""
    if name is None:
        return DEFAULT
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"workspace name {name!r}: use 1 to 63 lowercase letters, digits, '_' or '-', starting "
                         "with a letter or digit")
    return name


class Workspaces:
    """The workspaces under ``root``. ``rag_options``: ``HippoRAG`` keyword arguments (``storage``, ``dsn``,
    models, ``extractor``, config overrides) for every workspace; ``memory_options``: ``Memory`` keyword
    arguments (``batch_size``, ``worker``, ``poll_s``). ``separate_writer``: give each memory a second
    ``HippoRAG`` for its worker's writes (queries never wait for a batch). ``max_workspaces``,
    ``max_open``, ``idle_s``: the lifecycle limits of the module docstring (None: no limit); ``busy_wait_s``: how
    long opening a workspace waits for an open one to become idle before it is refused. Thread-safe."""

    def __init__(self, root: str | Path, *, rag_options: dict | None = None, memory_options: dict | None = None,
                 separate_writer: bool = True, max_workspaces: int | None = None, max_open: int | None = None,
                 idle_s: float | None = None, busy_wait_s: float = 5.0):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.memory_options = dict(memory_options or {})
        self.separate_writer = separate_writer
        self.max_workspaces, self.max_open, self.idle_s = max_workspaces, max_open, idle_s
        self.busy_wait_s = busy_wait_s
        self._opts, self._storage, server = storage_options(self.root, dict(rag_options or {}))
        #: where the workspaces' indexes live (their backend's; with PostgreSQL: the server named workspaces use)
        self._shared = backend_for(self._storage or "sqlite").shared(self.root, server)
        self._memories: OrderedDict[str, Memory] = OrderedDict()    # least recently used first
        self._leases: Counter[str] = Counter()
        self._used: dict[str, float] = {}
        self._names: dict[str, threading.Lock] = {}     # one lock per name: its opening and deletion
        self._closing: dict[str, threading.Event] = {}  # names being closed (idle, room): set once closed
        self._deleting: set[str] = set()
        self._opening = 0
        self._lock = threading.RLock()
        self._create_lock = threading.Lock()
        self._shared_lock = threading.Lock()
        self._encoder: SharedEncoder | None = None
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None
        if idle_s is not None:
            self._sweeper = threading.Thread(target=self._sweep_loop, name="hippo-workspaces-sweeper", daemon=True)
            self._sweeper.start()

    # ------------------------------------------------------------------ where
    def path(self, name: str | None) -> Path:
        """The folder of workspace ``name``."""
        name = check_name(name)
        return self.root if name == DEFAULT else self.root / FOLDER / name

    def exists(self, name: str | None) -> bool:
        """Whether workspace ``name`` holds an index (the default one always exists)."""
        from hippo_engine.store.opening import recorded_storage
        name = check_name(name)
        return name == DEFAULT or name in self._memories or recorded_storage(self.path(name)) is not None

    # ------------------------------------------------------------------ open
    def get(self, name: str | None, *, create: bool) -> Memory:
        """The memory of workspace ``name`` (None: the default one), opened on first use. ``create``: make it
        if missing (writes); otherwise a missing workspace is a ``KeyError``. Holds no lease: a caller that
        uses the memory for long takes one (:meth:`lease`)."""
        with self.lease(name, create=create) as memory:
            return memory

    def lease(self, name: str | None, *, create: bool) -> Lease:
        """A :class:`Lease` on workspace ``name``, opening it if needed (see :meth:`get`). Raises ``KeyError``
        (missing, or being deleted), :class:`WorkspaceLimitError`, :class:`WorkspacesBusyError`."""
        name = check_name(name)
        while True:
            with self._lock:
                if name in self._deleting:
                    raise KeyError(f"no workspace {name!r} (it is being deleted)")
                mem, closing = self._memories.get(name), self._closing.get(name)
                if mem is not None and (name == DEFAULT or self.path(name).is_dir()):
                    return self._take(name, mem)
                lock = self._names.setdefault(name, threading.Lock())
            if closing is not None:
                closing.wait()
                continue
            if mem is not None:
                self._forget(name, mem)     # another server process deleted it: forget our stale copy
            with lock:
                lease = self._open_locked(name, create)
            if lease is not None:
                return lease

    def _take(self, name: str, mem: Memory) -> Lease:
        """A lease on an open memory (under the global lock)."""
        self._leases[name] += 1
        self._used[name] = time.monotonic()
        self._memories.move_to_end(name)
        return Lease(self, name, mem)

    def _release(self, name: str) -> None:
        with self._lock:
            self._leases[name] -= 1
            if self._leases[name] <= 0:
                del self._leases[name]
            self._used[name] = time.monotonic()

    def _open_locked(self, name: str, create: bool) -> Lease | None:
        """Open ``name`` under its own lock (None: it was opened meanwhile, look again)."""
        with self._lock:
            if name in self._memories or name in self._closing:
                return None
            if name in self._deleting:
                raise KeyError(f"no workspace {name!r} (it is being deleted)")
        if not self.exists(name):
            if not create:
                raise KeyError(f"no workspace {name!r}")
            self._reserve(name)
        victims = self._make_room(name)
        try:
            for victim, mem in victims:
                self._close_now(victim, mem, "to open another")
            mem = self._open(name)
        except BaseException:
            with self._lock:
                self._opening -= name != DEFAULT
            raise
        with self._lock:
            self._opening -= name != DEFAULT
            self._memories[name] = mem
            return self._take(name, mem)

    def _reserve(self, name: str) -> None:
        """Make the folder of a new named workspace, unless ``max_workspaces`` exist already."""
        if name == DEFAULT:
            return
        with self._create_lock:
            folder = self.path(name)
            if self.max_workspaces is not None and not folder.is_dir():
                n = self._named_folders()
                if n >= self.max_workspaces:
                    raise WorkspaceLimitError(
                        f"this server holds {n} named workspaces, its limit (--max-workspaces "
                        f"{self.max_workspaces}): delete one (DELETE /workspaces/{{name}}) or raise the limit")
            folder.mkdir(parents=True, exist_ok=True)

    def _named_folders(self) -> int:
        base = self.root / FOLDER
        if not base.is_dir():
            return 0
        return sum(1 for p in base.iterdir() if p.is_dir() and NAME.fullmatch(p.name) and p.name != DEFAULT)

    def _make_room(self, name: str) -> list[tuple[str, Memory]]:
        """Count ``name`` as opening, taking the least recently used idle workspaces out of the table when
        ``max_open`` would be passed (the caller closes them). While none is idle it looks again for up to
        ``busy_wait_s`` seconds (a batch being indexed usually ends soon), then raises
        :class:`WorkspacesBusyError`."""
        if name == DEFAULT:
            return []
        deadline = time.monotonic() + self.busy_wait_s
        while True:
            with self._lock:
                victims = self._victims()
                if victims is not None:
                    self._opening += 1
                    return victims
            if time.monotonic() >= deadline:
                raise WorkspacesBusyError(f"{self.max_open} workspaces are open (--max-open-workspaces) and each "
                                          f"is in use; try again in {BUSY_RETRY_S} s")
            time.sleep(BUSY_POLL_S)

    def _victims(self) -> list[tuple[str, Memory]] | None:
        """Under the global lock: the idle workspaces to close so that one more may open, taken out of the
        table (None: not enough of them are idle)."""
        if self.max_open is None:
            return []
        excess = sum(n != DEFAULT for n in self._memories) + self._opening + 1 - self.max_open
        idle = [n for n in self._memories if n != DEFAULT and self._idle(n)][:max(excess, 0)]
        if len(idle) < excess:
            return None
        victims = [(n, self._memories.pop(n)) for n in idle]
        for n in idle:
            self._closing[n] = threading.Event()
        return victims

    def _idle(self, name: str) -> bool:
        """Whether open workspace ``name`` may be closed: no lease, and its queue has nothing to do."""
        return not self._leases.get(name) and self._memories[name].idle

    def _close_now(self, name: str, mem: Memory, why: str) -> None:
        """Close a memory taken out of the table (outside the global lock); then let waiters open it again."""
        try:
            mem.close()
            logger.info("workspace %r closed (%s)", name, why)
        except Exception:   # noqa: BLE001 - logged; the workspace opens again on its next request
            logger.warning("closing workspace %r failed", name, exc_info=True)
        finally:
            with self._lock:
                done = self._closing.pop(name, None)
            if done is not None:
                done.set()

    def _forget(self, name: str, mem: Memory) -> None:
        """Drop an open workspace whose data another process deleted (errors of its dead store are logged)."""
        with self._lock:
            if self._memories.get(name) is not mem:
                return
            self._memories.pop(name)
            self._closing[name] = threading.Event()
        self._close_now(name, mem, "deleted by another process")

    def _open(self, name: str) -> Memory:
        from hippo_engine import HippoRAG
        folder = self.path(name)
        opts = self._options_for(name)
        reader = HippoRAG(folder, **opts)
        recorded = reader.index_state.extractor
        if opts.get("extractor") is None and recorded not in (None, reader.config.extractor):
            reader.close()     # an existing index keeps the extractor it was built with
            opts["extractor"] = recorded
            reader = HippoRAG(folder, **opts)
        writer = None
        try:
            with self._shared_lock:
                if self._encoder is None:
                    self._encoder = share_encoder(reader, opts)
            reader._encoder = self._encoder     # the facade's encoder slot (``Forwarded`` to its models)
            if self.separate_writer:
                writer = HippoRAG(folder, **{**opts, "encoder": self._encoder, "llm": opts.get("llm")})
            return Memory(reader, writer=writer, **self.memory_options)
        except BaseException:
            if writer is not None:
                writer.close()
            reader.close()
            raise

    def _options_for(self, name: str) -> dict:
        """``HippoRAG`` arguments for a workspace: the shared ones, with the backend and where the backend keeps
        the workspace's index (:meth:`~hippo_engine.store.registry.SharedStorage.options`: for a named
        workspace on PostgreSQL, the server; its schema comes from its folder, never the default's)."""
        opts = dict(self._opts)
        if self._encoder is not None:
            opts["encoder"] = self._encoder
        if self._storage is not None:
            opts["storage"] = self._storage
        return self._shared.options(opts, name == DEFAULT)

    # ------------------------------------------------------------------ idle ones
    def sweep(self, now: float | None = None) -> list[str]:
        """Close the named workspaces unused for ``idle_s`` seconds (no lease, nothing queued); returns them."""
        if self.idle_s is None:
            return []
        now = time.monotonic() if now is None else now
        with self._lock:
            names = [n for n in self._memories if n != DEFAULT and self._idle(n)
                     and now - self._used.get(n, now) >= self.idle_s]
            taken = [(n, self._memories.pop(n)) for n in names]
            for n in names:
                self._closing[n] = threading.Event()
        for n, mem in taken:
            self._close_now(n, mem, f"unused for {self.idle_s:g} s")
        return names

    def _sweep_loop(self) -> None:
        assert self.idle_s is not None
        every = min(max(self.idle_s / 4, 0.05), 30.0)
        while not self._stop.wait(every):
            try:
                self.sweep()
            except Exception:   # noqa: BLE001 - the sweeper outlives one failure; logged
                logger.exception("closing idle workspaces failed")

    def open_names(self) -> list[str]:
        """The workspaces open now, least recently used first."""
        with self._lock:
            return list(self._memories)

    # ------------------------------------------------------------------ list, delete, close
    def list(self) -> list[dict]:
        """The workspaces: ``[{"name", "documents"}]`` (documents: how many its document list holds, however they
        were added: indexed, and accepted but not indexed yet; :mod:`.doclist`)."""
        names = [DEFAULT]
        base = self.root / FOLDER
        if base.is_dir():
            names += sorted(p.name for p in base.iterdir()
                            if p.is_dir() and NAME.fullmatch(p.name) and p.name != DEFAULT and self.exists(p.name)
                            and p.name not in self._deleting)
        return [{"name": n, "documents": self._count(n)} for n in names]

    def _count(self, name: str) -> int | None:
        """How many documents workspace ``name`` lists (:meth:`.Memory.documents`' total), read without opening it
        when it is not open (None: unreadable, logged)."""
        with self._lock:
            mem = self._memories.get(name)
        try:
            if mem is not None:
                return sum(mem.store.counts().values())
            return count_closed(self.path(name), self._shared)
        except Exception as e:  # noqa: BLE001 - one unreadable workspace does not hide the others
            logger.warning("workspace %r: cannot count its documents: %s", name, e)
            return None

    def delete(self, name: str) -> bool:
        """Delete workspace ``name`` with its data (its folder and, with PostgreSQL, its schema); False if it
        does not exist. The default workspace cannot be deleted. The workspace is marked first (requests to
        it get ``KeyError`` from then on); closing it (after its worker's batch) and dropping its data happen
        outside the global lock, so other workspaces are served meanwhile."""
        name = check_name(name)
        if name == DEFAULT:
            raise ValueError("the default workspace cannot be deleted (delete its documents instead)")
        with self._lock:
            if name in self._deleting:
                return False
            self._deleting.add(name)
            lock = self._names.setdefault(name, threading.Lock())
        try:
            with lock:
                with self._lock:
                    mem, closing = self._memories.pop(name, None), self._closing.get(name)
                if closing is not None:
                    closing.wait()
                if mem is None and not self.exists(name):
                    return False
                if mem is not None:
                    mem.close()
                self._drop(name)
        finally:
            with self._lock:
                self._deleting.discard(name)
                self._leases.pop(name, None)
                self._used.pop(name, None)
        return True

    def _drop(self, name: str) -> None:
        """Remove a closed workspace's data (its database: with PostgreSQL its schema) and its folder."""
        self._shared.drop(self.path(name))

    def close(self) -> None:
        """Close every open workspace (their workers finish their batch) and leave the embedded server."""
        self._stop.set()
        with self._lock:
            mems, self._memories = list(self._memories.values()), OrderedDict()
        for mem in mems:
            try:
                mem.close()
            except Exception:   # noqa: BLE001 - close the others; this one is logged
                logger.exception("closing a workspace failed")
        self._shared.close()

    def __enter__(self) -> Workspaces:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["DEFAULT", "NAME", "Lease", "SharedEncoder", "WorkspaceLimitError", "Workspaces", "WorkspacesBusyError",
           "check_name"]
