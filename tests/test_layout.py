"""The folder layout is the architecture: dependencies point one way (DESIGN.md §2)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
OURS = {"stare", "tasks", "envs", "agents", "training"}
ALLOWED = {
    "stare": set(),
    "tasks": set(),
    "envs": {"tasks"},
    "agents": {"envs", "tasks"},
    "training": {"stare", "agents", "envs", "tasks"},
}


def _imported_packages(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & OURS


@pytest.mark.parametrize("package", sorted(OURS))
def test_package_imports_only_what_the_layout_allows(package):
    bad = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for dep in _imported_packages(path) - ALLOWED[package] - {package}:
            bad.append(f"{path.relative_to(ROOT)} imports {dep}")
    assert not bad, "dependency direction broken:\n" + "\n".join(bad)


def test_stare_imports_only_torch_numpy_and_stdlib():
    import sys

    allowed = {"torch", "numpy", "__future__"} | set(sys.stdlib_module_names) | {"stare"}
    bad = []
    for path in sorted((ROOT / "stare").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module.split(".")[0]]
            bad += [f"{path.name}: {n}" for n in names if n not in allowed]
    assert not bad, bad
