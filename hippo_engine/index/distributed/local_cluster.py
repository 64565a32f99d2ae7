"""``LocalCluster``: a Ray cluster of a head and several worker nodes on this machine, for tests and
benchmarks of :class:`~.executor.RayExecutor` (the ``ray`` extra).

Each node is a raylet of its own (with its object store and worker processes), as on separate
machines; the head reserves no CPU, so every batch runs on a worker node. Every process binds to
127.0.0.1 (node address 127.0.0.1, no dashboard, no client server); :meth:`listeners` lists what
they listen on, to check it. :meth:`stop` ends every process the cluster started, by process id:
the nodes' own processes, then any worker process of theirs still alive, and removes the
cluster's temporary folder.

Ray offers no public call that starts a node bound to 127.0.0.1 without a shell command that swaps
it for the machine's outward address (``ray start --node-ip-address=127.0.0.1`` does), so this uses
the node class that Ray's own ``ray.cluster_utils.Cluster`` uses, without its global address file.
"""
from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from hippo_engine.index.distributed.executor import use_loopback


class LocalCluster:
    """``workers`` worker nodes of ``cpus_per_worker`` CPUs and a head of none, on 127.0.0.1.
    ``with LocalCluster(2) as c: RayExecutor(c.address)``."""

    def __init__(self, workers: int = 2, *, cpus_per_worker: int = 1, object_store_mb: int = 200):
        if workers < 1 or cpus_per_worker < 1:
            raise ValueError("LocalCluster: workers and cpus_per_worker must be at least 1")
        self.n_workers, self.cpus_per_worker, self.object_store_mb = workers, cpus_per_worker, object_store_mb
        self.head: Any = None
        self.nodes: list = []
        self.temp_dir: Path | None = None
        self._seen: dict = {}            # pid -> psutil.Process (its start time guards against pid reuse)

    @property
    def address(self) -> str:
        """The head's address (``127.0.0.1:port``)."""
        if self.head is None:
            raise RuntimeError("LocalCluster: not started")
        return self.head.gcs_address

    def _params(self, **extra):
        from ray._private.parameter import RayParams
        assert self.temp_dir is not None
        return RayParams(node_ip_address="127.0.0.1", include_dashboard=False, temp_dir=str(self.temp_dir),
                         object_store_memory=self.object_store_mb * 2**20, num_gpus=0, min_worker_port=0,
                         max_worker_port=0, **extra)

    def start(self) -> LocalCluster:
        """Start the head and the worker nodes; returns self."""
        use_loopback()
        from ray._private.node import Node
        self.temp_dir = Path(tempfile.mkdtemp(prefix="hray-", dir="/tmp"))   # short: Ray's socket paths
        try:
            self.head = Node(self._params(num_cpus=0), head=True, shutdown_at_exit=True, spawn_reaper=True)
            for _ in range(self.n_workers):
                self.add_worker()
        except BaseException:
            self.stop()
            raise
        return self

    def add_worker(self):
        """Start one more worker node; returns it."""
        from ray._private.node import Node
        node = Node(self._params(num_cpus=self.cpus_per_worker, gcs_address=self.address, include_log_monitor=False,
                                 node_manager_port=0),
                    head=False, shutdown_at_exit=True, spawn_reaper=True)
        self.nodes.append(node)
        return node

    # ------------------------------------------------------------------ processes
    def _node_pids(self, node) -> list[int]:
        out = []
        for infos in node.all_processes.values():
            for info in infos:
                proc = getattr(info, "process", None)
                if proc is not None and proc.poll() is None:
                    out.append(proc.pid)
        return out

    def processes(self) -> list:
        """Every live process of the cluster (``psutil.Process``): the nodes' and their descendants."""
        import psutil
        out: dict[int, psutil.Process] = {}
        for node in [self.head, *self.nodes]:
            if node is None:
                continue
            for pid in self._node_pids(node):
                try:
                    p = psutil.Process(pid)
                    out[pid] = p
                    for c in p.children(recursive=True):
                        out[c.pid] = c
                except psutil.NoSuchProcess:
                    continue
        for pid, proc in out.items():
            self._seen.setdefault(pid, proc)
        return list(out.values())

    def worker_processes(self, name: str = "") -> list:
        """The Ray worker processes on the worker nodes (``name``: only those whose title holds it,
        e.g. ``"ExtractEncodeWorker"`` for the indexing actors)."""
        import psutil
        out = []
        for node in self.nodes:
            for pid in self._node_pids(node):
                try:
                    kids = psutil.Process(pid).children(recursive=True)
                except psutil.NoSuchProcess:
                    continue
                for c in kids:
                    try:
                        title = " ".join(c.cmdline())
                    except psutil.Error:
                        continue
                    if title.startswith("ray::") and name in title:
                        out.append(c)
        return out

    def listeners(self) -> list[tuple[str, int, int]]:
        """(address, port, pid) of every TCP or UDP socket a cluster process listens on."""
        import psutil
        out = []
        for p in self.processes():
            try:
                conns = p.net_connections(kind="inet")
            except psutil.Error:
                continue
            for c in conns:
                if c.status == psutil.CONN_LISTEN or (c.type == 2 and not c.raddr):   # TCP listen, bound UDP
                    out.append((c.laddr.ip, c.laddr.port, p.pid))
        return out

    def stop(self) -> None:
        """Stop every process the cluster started and remove its folder."""
        import psutil
        self._disconnect()
        self.processes()                       # note the descendants before their parents go
        for node in [*self.nodes, self.head]:
            if node is None:
                continue
            try:
                node.kill_all_processes(check_alive=False, allow_graceful=True, wait=True)
            except Exception:   # noqa: BLE001 - the sweep below ends what is left
                pass
        for p in self._seen.values():
            try:
                p.send_signal(signal.SIGKILL)
                p.wait(timeout=10)
            except (psutil.NoSuchProcess, psutil.TimeoutExpired, psutil.AccessDenied):
                pass
        self.nodes, self.head = [], None
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None

    def _disconnect(self) -> None:
        """Leave the cluster first if this process is its driver (a driver whose head is gone exits)."""
        import sys
        ray = sys.modules.get("ray")
        if ray is None or self.head is None or not ray.is_initialized():
            return
        try:
            mine = ray.get_runtime_context().gcs_address == self.address
        except Exception:   # noqa: BLE001 - not connected the usual way: leave anyway
            mine = True
        if mine:
            ray.shutdown()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["LocalCluster"]
