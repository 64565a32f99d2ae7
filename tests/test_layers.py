"""The package's floors: which part may import which (every import counts, lazy ones inside functions and
``TYPE_CHECKING`` ones too). No two files import each other, no two packages import each other, and no part
imports one above it in :data:`FLOORS`. Run as a script for the counts:
``python tests/test_layers.py`` prints the file and package cycles and each part's imports."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hippo_engine"
#: installed under the package from the repository's top level (pyproject.toml): not part of the map
OUTSIDE = ("hippo_engine.evaluation", "hippo_engine.prompts")

#: the floors, bottom up; a part imports only its own floor or lower ones. A part is a subpackage or a
#: top-level module of hippo_engine ("hippo_engine" is the package's __init__).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("normalize", "progress", "lenient_json", "system", "errors", "modes", "datatypes", "results",
     "metadata_check", "dsn"),
    ("ids", "query_param"),
    ("config",),
    ("auto",),
    ("store",),
    ("inputs",),
    ("models",),
    ("llm",),
    ("qa",),
    ("index",),
    ("retrieve",),
    ("hirag",),
    ("graphrag",),
    ("kb",),
    ("query", "export"),
    ("hipporag",),
    ("hippo_engine",),
    ("integrations", "service"),
    ("cli",),
)


def modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    if name.startswith(OUTSIDE):
        return None
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _targets(node: ast.AST, module: str, is_package: bool, mods: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [t for a in node.names if (t := _resolve(a.name, mods))]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else []))
    found = []
    for a in node.names:
        full = f"{base}.{a.name}"
        t = _resolve(full, mods) if full in mods else _resolve(base, mods)
        if t:
            found.append(t)
    return found


def import_map() -> dict[str, set[str]]:
    """module -> the package's modules it imports (anywhere in the file)."""
    mods = modules()
    edges: dict[str, set[str]] = {}
    for m, p in mods.items():
        tree = ast.parse(p.read_text("utf-8"), str(p))
        out = {t for node in ast.walk(tree) for t in _targets(node, m, p.name == "__init__.py", mods)}
        out.discard(m)
        edges[m] = out
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph.get(w, ())))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "hippo_engine"


def part_map(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, targets in edges.items():
        for t in targets:
            if part(t) != part(m):
                out.setdefault(part(m), set()).add(part(t))
    return out


def floor_of() -> dict[str, int]:
    return {name: i for i, names in enumerate(FLOORS) for name in names}


def test_no_file_imports_another_that_imports_it_back():
    assert cycles(import_map()) == []


def test_no_package_imports_another_that_imports_it_back():
    assert cycles(part_map(import_map())) == []


def test_every_part_has_a_floor_and_imports_only_below_or_beside_it():
    edges = import_map()
    floors = floor_of()
    assert set(map(part, edges)) <= set(floors), sorted(set(map(part, edges)) - set(floors))
    upward = sorted(f"{m} -> {t}" for m, ts in edges.items() for t in ts if floors[part(t)] > floors[part(m)])
    assert upward == []


def test_the_wheel_lists_every_subpackage():
    """A package folder missing from pyproject.toml's list would be left out of the wheel."""
    import pytest
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's TOML reader")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in PACKAGE.rglob("__init__.py")}
    assert folders - listed == set()


if __name__ == "__main__":
    e = import_map()
    files, parts = cycles(e), cycles(part_map(e))
    print(f"modules: {len(e)}; imports: {sum(map(len, e.values()))}")
    print(f"file cycles: {len(files)}")
    for c in files:
        print("  " + " ".join(c))
    print(f"package cycles: {len(parts)}")
    for c in parts:
        print("  " + " ".join(c))
    fl = floor_of()
    print("upward imports:", sum(fl.get(part(t), 0) > fl.get(part(m), 0) for m, ts in e.items() for t in ts))
    for a, ts in sorted(part_map(e).items()):
        print(f"  {a} -> {', '.join(sorted(ts))}")
    sys.exit(0)
