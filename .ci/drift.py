"""Name the dependencies that moved since the lock, and which of them break the tests.

Run by ``.ci/run --latest`` with the virtualenv of the newest allowed versions::

    python .ci/drift.py VENV_PYTHON constraints.txt [--failed]

Without ``--failed`` it lists the packages whose installed version differs from
``constraints.txt``. With ``--failed`` (the suite failed in that virtualenv) it puts each moved
package back to its locked version, one at a time (``pip install --no-deps``), re-runs only the
tests that failed (``pytest --last-failed``) and names every package whose locked version makes
them pass; the newest version is reinstalled afterwards. Exit status 1 when the suite failed.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

#: how many moved packages are tried one by one at most (the direct dependencies come first)
MAX_TRIED = 12


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line)
        if m:
            pins[norm(m.group(1))] = m.group(2)
    return pins


def installed(python: str) -> dict[str, str]:
    out = subprocess.run([python, "-m", "pip", "list", "--format=json"], check=True, capture_output=True, text=True)
    return {norm(p["name"]): p["version"] for p in json.loads(out.stdout)}


def direct(pyproject: Path) -> set[str]:
    return {norm(m) for m in re.findall(r'"([A-Za-z0-9_.\-]+)[\[<>=!~ ;"]', pyproject.read_text())}


def moved(python: str, lock: Path) -> list[tuple[str, str, str]]:
    pins, have = locked(lock), installed(python)
    diff = [(n, pins[n], v) for n, v in have.items() if n in pins and v.split("+")[0] != pins[n].split("+")[0]]
    first = direct(lock.parent / "pyproject.toml")
    return sorted(diff, key=lambda d: (d[0] not in first, d[0]))


def tests_pass(python: str) -> bool:
    return subprocess.run([python, "-m", "pytest", "-q", "--last-failed", "-p", "no:randomly"],
                          capture_output=True).returncode == 0


def pip_pin(python: str, name: str, version: str) -> None:
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", f"{name}=={version}"], check=True)


def blame(python: str, diff: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    culprits = []
    for name, old, new in diff[:MAX_TRIED]:
        print(f"drift: trying {name} back at {old} (newest {new}) ...", flush=True)
        try:
            pip_pin(python, name, old)
            if tests_pass(python):
                culprits.append((name, old, new))
        finally:
            pip_pin(python, name, new)
    return culprits


def main(argv: list[str]) -> int:
    python, lock, failed = argv[0], Path(argv[1]), "--failed" in argv
    diff = moved(python, lock)
    print(f"drift: {len(diff)} package(s) differ from {lock.name}:")
    for name, old, new in diff:
        print(f"  {name} {old} -> {new}")
    if not failed:
        return 0
    culprits = blame(python, diff)
    if culprits:
        for name, old, new in culprits:
            print(f"drift: the failing tests pass with {name}=={old}: {name} {new} breaks them; bound it below "
                  f"{new} in pyproject.toml (or fix the code), then regenerate the lock with .ci/lock")
    else:
        print("drift: no single package put back makes the failing tests pass (several moved together, or a "
              f"package beyond the first {MAX_TRIED}); see the failures above")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
