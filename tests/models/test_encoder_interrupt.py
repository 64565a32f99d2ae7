"""Ctrl-C while the encoder runs its worker threads, with stderr piped (``... 2>&1 | tee log``).

Before the fix the workers updated the progress bar themselves; interrupted with its output piped
into ``tee``, the process hung in the thread pool's shutdown, a worker waiting on tqdm's write lock."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hippo_engine.models.encoder import TransformersEncoder

pytestmark = pytest.mark.slow


class _ThreadRecordingBar:
    """A progress bar that notes which thread called it."""

    def __init__(self, *args, **kwargs):
        self.threads: set[int] = set()
        _ThreadRecordingBar.last = self

    def update(self, n):
        self.threads.add(threading.get_ident())

    def close(self):
        self.threads.add(threading.get_ident())


def test_only_the_calling_thread_touches_the_progress_bar(monkeypatch):
    import tqdm.auto
    enc = TransformersEncoder(num_workers=2)      # loads the model with the real tqdm
    monkeypatch.setattr(tqdm.auto, "tqdm", _ThreadRecordingBar)
    texts = [f"sentence number {i} about rivers and mountains" * (1 + i % 5) for i in range(300)]
    enc.encode(texts, show_progress=True)
    assert _ThreadRecordingBar.last.threads == {threading.get_ident()}


def _default_sigint():
    signal.signal(signal.SIGINT, signal.SIG_DFL)   # the test runner may run with SIGINT ignored


def test_ctrl_c_with_output_piped_into_tee_exits_130(tmp_path: Path):
    docs = [{"title": f"Doc {i}", "text": " ".join(f"word{(i * 7 + j) % 97}" for j in range(60))}
            for i in range(800)]
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps(docs))
    log = tmp_path / "log"
    cli = [sys.executable, "-m", "hippo_engine.cli", "index", str(corpus), "--save-dir", str(tmp_path / "idx"),
           "--extractor", "ner"]
    shell = " ".join(f"'{a}'" for a in cli) + f" 2>&1 | tee '{log}' >/dev/null; exit ${{PIPESTATUS[0]}}"
    p = subprocess.Popen(["bash", "-c", shell], start_new_session=True, preexec_fn=_default_sigint)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and "Embedding" not in (log.read_text(errors="replace")
                                                                 if log.exists() else ""):
            assert p.poll() is None, log.read_text(errors="replace")[-2000:]
            time.sleep(0.2)
        time.sleep(1)
        os.killpg(p.pid, signal.SIGINT)          # what Ctrl-C does: the whole foreground group
        rc = p.wait(timeout=60)                  # a hang fails here
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert rc == 130, (rc, log.read_text(errors="replace")[-2000:])    # hippo-engine's own status
