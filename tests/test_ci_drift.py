"""``.ci/drift.py``, the part of ``.ci/run --latest`` that names what moved since the lock."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _drift():
    spec = importlib.util.spec_from_file_location("ci_drift", ROOT / ".ci" / "drift.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lock_parsing_normalises_names_and_ignores_comments(tmp_path):
    lock = tmp_path / "constraints.txt"
    lock.write_text("# header\nJSON_Repair==0.64.6\n    # via hippo-engine\ntorch==2.13.0 ; sys_platform == 'linux'\n")
    assert _drift().locked(lock) == {"json-repair": "0.64.6", "torch": "2.13.0"}


def test_moved_names_each_package_whose_installed_version_differs(tmp_path):
    drift = _drift()
    have = drift.installed(sys.executable)
    pytest_version = have["pytest"]
    (tmp_path / "pyproject.toml").write_text('dependencies = ["pytest>=8"]\n')
    lock = tmp_path / "constraints.txt"
    lock.write_text(f"pytest==0.0.1\npluggy=={have['pluggy']}\n")
    assert drift.moved(sys.executable, lock) == [("pytest", "0.0.1", pytest_version)]
    assert drift.main([sys.executable, str(lock)]) == 0      # listing only: no failure to blame
