"""The engine's one worker pool (hippo_engine.system): bounded parallel map, fork safety."""
import os
import threading
import time

import pytest

from hippo_engine import system


def test_parallel_map_runs_every_item_at_most_workers_at_a_time():
    running, peak, done = [0], [0], []
    lock = threading.Lock()

    def work(i):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
            done.append(i)

    system.parallel_map(work, range(12), workers=2)
    assert sorted(done) == list(range(12)) and peak[0] <= 2
    with pytest.raises(ZeroDivisionError):
        system.parallel_map(lambda i: 1 / i, [1, 0, 2], workers=2)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_pool_is_forgotten_in_a_forked_child():
    pool = system.worker_pool()
    assert system.worker_pool() is pool
    pid = os.fork()
    if pid == 0:   # child: the parent's pool threads do not exist here
        ok = system._POOL is None
        out = []
        system.parallel_map(out.append, range(4), workers=2)
        os._exit(0 if ok and sorted(out) == [0, 1, 2, 3] and system.worker_pool() is not pool else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert system.worker_pool() is pool
