"""How the encoder runs its forward passes on the CPU: on a pool of worker threads of one torch thread each
(:func:`run_batches`, :func:`run_pool`), the process's torch thread count set to 1 meanwhile and restored
afterwards (:func:`on_one_thread`), and the workers' freed memory handed back to the OS
(:func:`release_free_memory`). See :class:`~hippo_engine.models.encoder.TransformersEncoder` ("Threads")."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

import numpy as np


def release_free_memory() -> None:
    """Hand freed heap memory back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    The worker threads' malloc arenas keep the activations of large batches after they are
    freed; trimming after an encode keeps that from adding to the process's resident size."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None   # libc.malloc_trim, False where missing, None before the first look


def on_one_thread(one_thread: bool, fn, *args):
    """``fn(*args)``, with the process's torch threads set to 1 where ``one_thread`` (an encoder that runs its
    batches on workers of one thread each, as :func:`run_batches` does), restored afterwards."""
    import torch

    if not one_thread:
        return fn(*args)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn(*args)
    finally:
        torch.set_num_threads(before)


def run_batches(run, batches: list[np.ndarray], lengths, progress, num_workers: int, one_thread: bool) -> int:
    """Run ``run(batch)`` for every batch: in this thread, or on a pool of up to ``num_workers``
    threads of one torch thread each (``one_thread``: a CPU encoder with several workers; ``lengths()``: each
    batch's token length, for the pool's order). Closes ``progress``; returns the workers used."""
    import torch

    workers = min(num_workers, len(batches)) if one_thread else 1
    threads_before = torch.get_num_threads()
    try:
        if one_thread:
            torch.set_num_threads(1)
        if workers <= 1:
            for idx in batches:
                run(idx)
                if progress is not None:
                    progress.update(len(idx))
        else:
            run_pool(run, batches, lengths(), workers, progress)
    finally:
        if one_thread:
            torch.set_num_threads(threads_before)
        if progress is not None:
            progress.close()
    return workers


def run_pool(run, batches: list[np.ndarray], lengths: list[int], workers: int, progress) -> None:
    """Run ``run(batch)`` for every batch on ``workers`` threads, costliest batches (by tokens)
    first so the workers finish together. Only this (the calling) thread touches ``progress``:
    a worker blocked on the progress bar's write lock (stderr piped into a reader that died on
    Ctrl-C) would hang the pool's shutdown. On an error or an interrupt the batches not started
    yet are dropped and the running ones (one forward pass each) are waited for."""
    cost = np.array([len(b) * length for b, length in zip(batches, lengths, strict=True)])
    queue = [batches[i] for i in np.argsort(-cost, kind="stable")]
    pool = ThreadPoolExecutor(max_workers=workers, initializer=one_torch_thread)
    try:
        futures = {pool.submit(run, idx): len(idx) for idx in queue}
        for f in as_completed(futures):
            f.result()
            if progress is not None:
                progress.update(futures[f])
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def one_torch_thread() -> None:
    """Pool initializer: each encoder worker runs torch on one thread."""
    import torch
    torch.set_num_threads(1)
