"""The folder layout is the architecture: dependencies point one way (CONTRIBUTING.md, "Layout")."""

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


# ---- import graph: no circles, no first-party imports inside functions, small training modules -----

MAX_TRAINING_LINES = 350

# Exceptions to the rules below: none today. An entry needs a reason in a comment beside it.
ALLOWED_INNER_IMPORTS: set[str] = set()
ALLOWED_CIRCLES: list[set[str]] = []
ALLOWED_LONG: set[str] = set()
# First-party modules that need an optional extra at import time: imported lazily, where used.
OPTIONAL_EXTRA_MODULES = {"envs.openenv.server"}    # the `interop` extra (openenv, fastmcp)


def _modules() -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every first-party module."""
    out = {}
    for package in OURS:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _owner(dotted: str) -> str:
    """The first-party module an imported name lives in (`training.batch.collate` -> training.batch)."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted


def _imports(name: str, source: str | None = None) -> list[tuple[str, int, bool]]:
    """(imported first-party module, line, inside a function) for every import statement of `name`."""
    path = MODULES.get(name, ROOT / f"{name.replace('.', '/')}.py")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            targets = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join(up + ([child.module] if child.module else []))
                targets = [f"{base}.{alias.name}" for alias in child.names]
            for target in targets:
                owner = _owner(target) if target.split(".")[0] in OURS else ""
                if owner and owner != name:
                    found.append((owner, child.lineno, inside))
            visit(child, inside)

    visit(ast.parse(path.read_text() if source is None else source, filename=str(path)), False)
    return found


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan), i.e. the import circles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return circles


def test_there_is_no_import_circle():
    graph = {name: {dep for dep, _, _ in _imports(name)} for name in MODULES}
    circles = [sorted(c) for c in _circles(graph) if c not in ALLOWED_CIRCLES]
    assert not circles, f"import circles: {circles}"


def test_first_party_imports_sit_at_the_top_of_the_module():
    bad = [f"{MODULES[name].relative_to(ROOT)}:{line} imports {dep}" for name in sorted(MODULES)
           for dep, line, inside in _imports(name)
           if inside and dep not in OPTIONAL_EXTRA_MODULES
           and str(MODULES[name].relative_to(ROOT)) not in ALLOWED_INNER_IMPORTS]
    assert not bad, "first-party imports inside functions (move them to the top):\n" + "\n".join(bad)


def test_training_modules_stay_small():
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "training").rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_TRAINING_LINES}
    assert set(long) <= ALLOWED_LONG, f"training/ modules over {MAX_TRAINING_LINES} lines: {long}"


def test_the_layout_checks_catch_what_they_look_for():
    """The circle finder sees a planted circle; the import reader a planted inner and relative import."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    probe = "from . import sampling\n\n\ndef f():\n    from training.batch import collate\n"
    assert _imports("training.probe", probe) == [("training.sampling", 1, False), ("training.batch", 5, True)]
