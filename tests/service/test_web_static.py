"""The web page's files (hippo_engine/service/web/): present, shipped in the wheel, local only, the
vendored graph library unchanged from its recorded source, and untrusted text never parsed as HTML.
The page itself runs in a real browser in tests/service/integration/test_web_browser.py."""
from __future__ import annotations

import fnmatch
import hashlib
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from hippo_engine.service.web import FILES, WEB_DIR

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(WEB_DIR.glob("*.js"))


class _Refs(HTMLParser):
    """The src/href of an HTML file's elements."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.refs.append((tag, value))


def test_files_present_and_every_script_listed():
    for name in FILES:
        assert (WEB_DIR / name).is_file(), f"{WEB_DIR / name} is missing"
    assert {p.name for p in SCRIPTS} <= set(FILES), "a script in web/ is not in FILES"


def test_wheel_ships_the_files():
    """pyproject's package data for hippo_engine.service.web matches every file the page needs."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "hippo_engine.service.web" in config["packages"]
    patterns = config["package-data"]["hippo_engine.service.web"]
    for name in FILES:
        assert any(fnmatch.fnmatch(name, p) for p in patterns), f"{name} is not shipped (package data {patterns})"


def test_index_loads_only_local_files():
    parser = _Refs()
    parser.feed((WEB_DIR / "index.html").read_text())
    scripts = [ref for tag, ref in parser.refs if tag == "script"]
    assert scripts[0] == "vendor/cytoscape.min.js" and "app.js" in scripts
    assert {Path(s).name for s in scripts} == {p.name for p in SCRIPTS} | {"cytoscape.min.js"}
    for tag, ref in parser.refs:
        if ref.startswith("#") or ref.startswith("data:"):
            continue
        assert "//" not in ref and ":" not in ref, f"<{tag}> loads {ref!r} from elsewhere"
        assert (WEB_DIR / ref).is_file(), f"<{tag}> refers to {ref!r}, not in {WEB_DIR}"


def test_vendored_library_matches_its_record():
    """vendor/README.txt names the version and sha256 of cytoscape.min.js; the file is that one."""
    record = (WEB_DIR / "vendor" / "README.txt").read_text()
    lib = (WEB_DIR / "vendor" / "cytoscape.min.js").read_bytes()
    want = re.search(r"sha256 of cytoscape\.min\.js\s+([0-9a-f]{64})", record)
    assert want, "vendor/README.txt records no sha256 of cytoscape.min.js"
    assert hashlib.sha256(lib).hexdigest() == want.group(1)
    version = re.search(r"Cytoscape\.js (\d+\.\d+\.\d+)", record)
    assert version and f'version="{version.group(1)}"'.encode() in lib
    license_text = (WEB_DIR / "vendor" / "cytoscape.LICENSE").read_text()
    assert "The Cytoscape Consortium" in license_text and "Permission is hereby granted" in license_text


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_never_parse_text_as_html(script):
    """Passages, titles and answers come from users: the page sets them as text only."""
    code = script.read_text()
    for banned in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                   "http://", "https://"):
        assert banned not in code, f"{script.name} uses {banned}"


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_scripts_parse(script):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (the browser test still runs the scripts)")
    done = subprocess.run([node, "--check", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
