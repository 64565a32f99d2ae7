"""Personalized PageRank kernel, built once per graph version, for one query or a batch.

The walk follows an edge (probability proportional to its weight) with probability
``damping`` and jumps to the reset distribution otherwise; nodes without edges send their
mass back along the reset distribution, as igraph's PRPACK solver does, so results match
``igraph.Graph.personalized_pagerank(..., implementation="prpack")``.

How it is computed. With W the symmetric weight matrix, D the node strengths and
P = W D^-1 the transition matrix, the PPR vector is x = y / sum(y) with (I - d P) y = r
(the dangling-node term only rescales y). Substituting y = D^1/2 z gives the symmetric
system (I - d S) z = D^-1/2 r with S = D^-1/2 W D^-1/2, whose spectrum lies in
[1 - d, 1 + d]. ``PPRKernel`` stores S once as a CSR matrix (float32 by default) and solves
the system by the fixed-point steps z <- D^-1/2 r + d S z (spectrum of d S in [-d, d]),
either with Chebyshev acceleration (default: z_k+1 = w_k+1 (D^-1/2 r + d S z_k) +
(1 - w_k+1) z_k-1 with the classical weights w; convergence factor about
(1 - sqrt(1 - d^2)) / d = 0.27 per step at d = 0.5, against 0.5 for plain power iteration,
so about 13 sparse products instead of 20 for an L1 change of 1e-6) or plainly
(``method="power"``). The weights are fixed numbers and there are no inner products: every
column (query) goes through exactly the same arithmetic whatever else is in its batch.

Determinism. Each column stops on its own when the L1 change of its iterate falls below
``tol``; that change is summed over the column as one contiguous 1-D array, and converged
columns leave the batch, so a query gets bit-identical scores alone or in any batch, in any
run (scipy's product for one column and torch's CSR x dense product for a block both sum
each row's terms in stored order, so a column of a block is bit-identical to a lone vector;
torch's kernel is used only after a probe product shows it so on this CPU, else scipy's block
product; ``tests/retrieve/test_ppr.py`` checks it).
"""
from __future__ import annotations

import contextlib
import math

import numpy as np
import scipy.sparse as sp

from hippo_engine.system import parallel_map, usable_cpus

METHODS = ("chebyshev", "power")
DTYPES = ("float32", "float64")


def _torch_csr(S: sp.csr_matrix):
    """The same CSR arrays as a torch sparse tensor (no copy), or None without torch."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return None
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(torch.from_numpy(S.indptr), torch.from_numpy(S.indices),
                                       torch.from_numpy(S.data), size=S.shape, check_invariants=False)


#: columns of the probe block that compares torch's product with scipy's
PROBE_COLUMNS = 4


def _same_products(S: sp.csr_matrix, T) -> bool:
    """Whether torch's CSR x dense product equals scipy's one-column products bit for bit on a
    random block (it sums each row's terms in stored order unless the build fuses them)."""
    import torch

    z = np.random.default_rng(0).random((S.shape[1], PROBE_COLUMNS)).astype(S.dtype)
    with _one_torch_thread(True):
        block = (T @ torch.from_numpy(z)).numpy()
    return all(np.array_equal(block[:, j], S @ np.ascontiguousarray(z[:, j])) for j in range(PROBE_COLUMNS))


def _col_sums(m: np.ndarray) -> np.ndarray:
    """Sum of each column of a 2-D array, each computed as a 1-D contiguous (pairwise) sum,
    so a column's sum never depends on how many columns there are."""
    if m.shape[1] == 1:
        return np.array([m[:, 0].sum()])
    t = np.ascontiguousarray(m.T)
    return np.array([row.sum() for row in t])


def _torch_one_thread_here() -> None:
    """Give torch one thread in the calling pool thread: blocks of columns run side by side on
    the shared pool, each with one torch thread. torch's product and scipy's (measured: 2
    threads 1.6-2.1x faster than one on 58k-580k nodes) run without the GIL."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@contextlib.contextmanager
def _one_torch_thread(active: bool):
    """Run torch's sparse products on one thread, then restore the thread count. Two OpenMP
    threads were 2x faster on an idle 2-core machine but 2-17x slower than one while another
    process kept a core busy (threads wait for each other every product), so one it is."""
    if not active:
        yield
        return
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        yield
        return
    before = torch.get_num_threads()
    if before != 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if before != 1:
            torch.set_num_threads(before)


class PPRKernel:
    """PPR over one undirected weighted graph (``src``/``dst``/``weight`` given once per pair;
    repeated pairs add up). Build once per graph version; ``run`` answers any number of
    reset vectors."""

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, dtype: str = "float32"):
        if str(np.dtype(dtype)) not in DTYPES:
            raise ValueError(f"PPR dtype must be one of {DTYPES}, got {dtype!r}")
        self.n = int(n)
        self.dtype = np.dtype(dtype)
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        w = np.asarray(weight, dtype=np.float64)
        keep = src != dst          # a self-loop is not an edge of the walk's graph here
        if not keep.all():
            src, dst, w = src[keep], dst[keep], w[keep]
        del keep
        strength = np.bincount(src, weights=w, minlength=n) + np.bincount(dst, weights=w, minlength=n)
        self.isolated = ~(strength > 0)
        inv_sqrt = np.zeros(n)
        inv_sqrt[~self.isolated] = 1.0 / np.sqrt(strength[~self.isolated])
        vals = w * inv_sqrt[src] * inv_sqrt[dst]
        idx_dtype = np.int32 if max(n, 2 * len(src)) < 2 ** 31 - 1 else np.int64
        rows = np.concatenate([src, dst]).astype(idx_dtype)
        cols = np.concatenate([dst, src]).astype(idx_dtype)
        del src, dst, w            # (temporaries are dropped as soon as they are used: on a large
        data = np.concatenate([vals, vals])    # graph they are the peak of building the kernel)
        del vals
        S = sp.coo_matrix((data, (rows, cols)), shape=(n, n))
        del data, rows, cols
        S = S.tocsr()              # duplicates summed, columns sorted per row
        S.sum_duplicates()
        self.S = sp.csr_matrix((S.data.astype(self.dtype), S.indices.astype(idx_dtype), S.indptr.astype(idx_dtype)),
                               shape=(n, n))
        self.sqrt_strength64 = np.sqrt(np.where(self.isolated, 0.0, strength))
        self.sqrt_strength = self.sqrt_strength64.astype(self.dtype)
        self.inv_sqrt64 = inv_sqrt
        self.last_iterations: list[int] = []
        self._torch_S = None       # the same CSR arrays seen by torch (built on first use)
        self.workers = usable_cpus()   # threads that solve blocks of columns side by side

    @classmethod
    def from_graph(cls, graph, dtype: str = "float32") -> PPRKernel:
        """The kernel of a ``GraphData`` (its ``src``/``dst``/``weight`` arrays)."""
        return cls(graph.num_nodes, graph.src, graph.dst, graph.weight, dtype)

    @property
    def nbytes(self) -> int:
        """Bytes of the stored operator (CSR arrays and the strength vectors)."""
        return int(self.S.data.nbytes + self.S.indices.nbytes + self.S.indptr.nbytes
                   + self.sqrt_strength.nbytes + self.sqrt_strength64.nbytes + self.inv_sqrt64.nbytes)

    # ------------------------------------------------------------------------------------
    def auto_block_size(self) -> int:
        """Columns per sparse x dense product: as many as fit in 2 MB, at most 16, and one at a
        time below 4. Measured per query on 2 cores with blocks solved on 2 threads (32 queries):
        58k nodes: 1 column 7.0 ms, 4: 5.5, 8: 4.1, 16: 6.3; 580k nodes: 1 column 86 ms,
        4: 142, 8: 101, 16: 137 (several columns pay only while they stay in cache)."""
        cols = int(min(16, (2 << 20) // max(1, self.n * self.dtype.itemsize)))
        return cols if cols >= 4 else 1

    def run(self, reset: np.ndarray, damping: float = 0.5, tol: float = 1e-6, max_iter: int = 200,
            method: str = "chebyshev", block_size: int | None = None,
            workers: int | None = None) -> np.ndarray:
        """Stationary distribution(s) for ``reset`` of shape (n,) or (n, b).

        Negative or NaN reset entries count as 0; each column is normalised to sum 1 (an
        all-zero column gives a uniform reset). Columns are solved ``block_size`` at a time
        (one sparse x dense product per step; None: ``auto_block_size()``), blocks on
        ``workers`` threads side by side (None: ``self.workers``, the usable CPUs); each stops when
        its L1 change is below ``tol`` or after ``max_iter`` steps (float32 rounding keeps the
        change above about 1e-7, so a tighter ``tol`` needs ``dtype="float64"``). Returns
        float64 columns summing to 1, of the same shape as ``reset``. ``self.last_iterations``
        holds the steps each column took.
        """
        if method not in METHODS:
            raise ValueError(f"PPR method must be one of {METHODS}, got {method!r}")
        if not (0.0 < damping < 1.0):
            raise ValueError(f"damping must lie in (0, 1), got {damping!r}")
        r = np.asarray(reset, dtype=np.float64)
        single = r.ndim == 1
        if single:
            r = r[:, None]
        if r.shape[0] != self.n:
            raise ValueError(f"reset has {r.shape[0]} rows, the graph {self.n} nodes")
        b = r.shape[1]
        out = np.empty((self.n, b))
        self.last_iterations = [0] * b
        step = self.auto_block_size() if block_size is None else max(1, int(block_size))
        # no convergence check before the worst-case step count minus 3 (checks cost passes over
        # the vectors; the count is a fixed number, so batching cannot change when a column stops)
        first_check = max(1, iterations_for(tol, damping, method) - 3)
        spans = [slice(s, min(b, s + step)) for s in range(0, b, step)]

        def solve(cols: slice, in_pool: bool = False) -> None:
            if in_pool:
                _torch_one_thread_here()
            out[:, cols] = self._run_block(r[:, cols], damping, tol, max_iter, method,
                                           np.arange(cols.start, cols.stop), first_check)

        workers = min(len(spans), self.workers if workers is None else max(1, int(workers)))
        if step > 1 and b > 1:
            self._torch_matrix()   # built here, not by two workers at once
        with _one_torch_thread(step > 1 and b > 1):
            if workers <= 1:
                for cols in spans:
                    solve(cols)
            else:
                # whole blocks per thread: no barrier inside a block's iteration, so a thread
                # slowed by another process delays only its own blocks
                parallel_map(lambda cols: solve(cols, in_pool=True), spans, workers)
        return out[:, 0] if single else out

    def _product(self, z: np.ndarray) -> np.ndarray:
        """``S @ z`` for a C-contiguous (n, b) block. Several columns: torch's CSR x dense
        kernel on one thread (measured 1.3-1.5x faster than scipy's for 16 columns at 18k-600k
        nodes, also with another busy process on the machine); one column: scipy's (faster for
        one vector). Both sum each row's products in stored order, so every column is
        bit-identical to a single scipy product whichever path runs it."""
        if z.shape[1] < 2:
            return self.S @ z
        T = self._torch_matrix()
        if T is None:
            return self.S @ z
        import torch

        return (T @ torch.from_numpy(z)).numpy()

    def _torch_matrix(self):
        """torch's view of the CSR arrays, or None where its product is not bit-identical to
        scipy's on this CPU (checked once per kernel: some builds fuse multiply and add on some
        CPUs, which rounds differently; scipy's block product is then used, as exact but slower)."""
        if self._torch_S is None:
            T = _torch_csr(self.S)
            self._torch_S = False if T is None or not _same_products(self.S, T) else T
        return None if self._torch_S is False else self._torch_S

    def _run_block(self, r: np.ndarray, d: float, tol: float, max_iter: int, method: str,
                   cols: np.ndarray, first_check: int = 1) -> np.ndarray:
        n, b = r.shape
        r = np.where(np.isnan(r) | (r < 0), 0.0, r)
        sums = _col_sums(r)
        zero = ~(sums > 0)
        if zero.any():
            r[:, zero] = 1.0 / n
            sums = _col_sums(r)
        r = r / sums
        dt = self.dtype
        rhs = np.ascontiguousarray((r * self.inv_sqrt64[:, None]).astype(dt))
        # z <- omega_k (rhs + d S z) + (1 - omega_k) z_prev: Jacobi-style steps on z = rhs + d S z
        # (spectrum of d S in [-d, d]) with Chebyshev weights omega (all 1 for power iteration)
        z_out = np.empty((n, b), dt)
        prev = np.zeros((n, b), dt)    # z_{k-1} of the columns still running (``active``)
        z = rhs.copy()                 # z_1 = rhs (from z_0 = 0)
        active = np.arange(b)
        sq = self.sqrt_strength[:, None]
        cheb = method == "chebyshev"
        omega = 1.0
        for it in range(1, max_iter + 1):
            # z holds z_it, prev holds z_{it-1}; has the column converged?
            if it >= first_check or it == max_iter:
                diff = z - prev
                np.abs(diff, out=diff)
                diff *= sq
                conv = _col_sums(diff) < tol
            else:
                conv = np.zeros(len(active), bool)
            if it == max_iter:
                conv[:] = True
            if conv.any():
                for c in np.flatnonzero(conv):
                    self.last_iterations[int(cols[active[c]])] = it
                z_out[:, active[conv]] = z[:, conv]
                if conv.all():
                    break
                keep = ~conv
                active = active[keep]
                z = np.ascontiguousarray(z[:, keep])
                prev = np.ascontiguousarray(prev[:, keep])
                rhs = np.ascontiguousarray(rhs[:, keep])
            t = self._product(z)
            t *= d
            t += rhs
            if cheb:
                omega = 2.0 / (2.0 - d * d) if it == 1 else 1.0 / (1.0 - d * d * omega / 4.0)
                t *= omega
                prev *= 1.0 - omega
                t += prev
            prev, z = z, t
        z = z_out
        y = z.astype(np.float64) * self.sqrt_strength64[:, None]
        if self.isolated.any():
            y[self.isolated] = r[self.isolated]
        return y / _col_sums(y)


def personalized_pagerank(n: int, src: np.ndarray, dst: np.ndarray, weight: np.ndarray, reset: np.ndarray,
                          damping: float = 0.5, tol: float = 1e-6, max_iter: int = 200, dtype: str = "float32",
                          method: str = "chebyshev") -> np.ndarray:
    """One-shot convenience wrapper: build a ``PPRKernel`` and run it."""
    return PPRKernel(n, src, dst, weight, dtype).run(reset, damping, tol, max_iter, method)


def iterations_for(tol: float, damping: float, method: str = "chebyshev") -> int:
    """Worst-case number of steps to bring a unit L1 change below ``tol`` (the asymptotic
    convergence factor of the method)."""
    if not (0 < tol < 1) or not (0 < damping < 1):
        return 1
    if method == "power":
        rate = damping
    else:
        k = (1 + damping) / (1 - damping)
        rate = (math.sqrt(k) - 1) / (math.sqrt(k) + 1)
    return int(math.ceil(math.log(tol) / math.log(rate))) + 1
