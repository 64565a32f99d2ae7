"""``/health`` probes for ``serve-abuse`` from a process of their own, so that the harness's threads
(clients, sockets, the scripted LLM) never delay a probe's clock: ``python -m reproduce.serve_abuse_probe
URL PATH EVERY TIMEOUT`` probes until its standard input closes, then writes one JSON line per probe
(after a first line ``probing``; ``time.monotonic`` is the machine's clock on Linux, so its times compare
with the harness's).
:class:`ProbeProcess` runs it."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict

from .common import REPO_ROOT
from .serve_abuse_phases import Probe, Prober


class ProbeProcess:
    """A :class:`~reproduce.serve_abuse_phases.Prober` (fresh connections, on time) in a subprocess."""

    def __init__(self, url: str, path: str, every: float, timeout: float):
        self.args = [sys.executable, "-m", "reproduce.serve_abuse_probe", url, path, str(every), str(timeout)]
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None

    def start(self) -> ProbeProcess:
        """Start it and wait until it probes (its first line)."""
        self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=str(REPO_ROOT))
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "probing":
            self.proc.kill()
            raise RuntimeError("the probe process did not start")
        return self

    def stop(self) -> list[Probe]:
        """Close its input, read its probes (kill it if it does not end in time)."""
        assert self.proc is not None
        try:
            out, _ = self.proc.communicate(input="", timeout=self.timeout + 60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return [Probe(**json.loads(line)) for line in out.splitlines() if line.strip()]


def main(argv: list[str]) -> int:
    url, path, every, timeout = argv[0], argv[1], float(argv[2]), float(argv[3])
    prober = Prober(url, "GET", path, every, fresh=True, timeout=timeout).start()
    print("probing", flush=True)
    sys.stdin.read()
    for probe in prober.stop():
        print(json.dumps(asdict(probe)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
