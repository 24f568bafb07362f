"""The floors of docs/architecture.md, checked on the tree: every import, read from the source (AST).

The allowed arrows are data (:data:`ALLOWED`): a module may import the project packages its
floor lists, and nothing else of the project. Imports inside functions count like any other
(a command imports heavy modules where it uses them, but may not hide a circle that way);
imports under ``if TYPE_CHECKING:`` are annotations only and do not run, so they are left out.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("contract", "features", "forecasting", "training_data", "scheduler", "storage", "gpuplan")
TOP_MODULES = ("daemon",)
TOOLS = ("benchmarks",)
LOWER = {"contract", "features", "forecasting", "training_data", "scheduler", "storage"}

#: Floor (the longest matching module prefix) -> the project floors it may import.
ALLOWED: dict[str, set[str]] = {
    # 1. the shared vocabulary: nothing of the project
    "contract": {"contract"},
    # 2. the pure packages, along the existing arrows
    "features": {"contract", "features"},
    "training_data": {"contract", "features", "training_data"},
    "forecasting": {"contract", "features", "forecasting"},
    "scheduler": {"contract", "scheduler"},
    "storage": {"contract", "storage"},
    # 3. the use cases
    "gpuplan.app": LOWER | {"gpuplan.app"},
    # 4. the faces: the command line (gpuplan/cli.py, cmd_*.py and their helpers) and the daemon
    "gpuplan": LOWER | {"gpuplan.app", "gpuplan"},
    "daemon": LOWER | {"gpuplan.app"},
    # tools beside the tree (benchmark scripts) may use anything, and are imported by nothing
    "benchmarks": LOWER | {"gpuplan.app", "gpuplan", "daemon", "benchmarks", "tests"},
}

#: Modules of the command-line face that stand for one command each: none imports another face.
FACE_PREFIXES = ("gpuplan.cmd_", "gpuplan.cli", "gpuplan.http", "daemon")
#: The one face-to-face arrow, with its reason.
FACE_EXCEPTIONS = {
    ("gpuplan.cmd_daemon", "daemon"): "`gpuplan daemon` hands its checked options to daemon.py (main)",
    (
        "daemon",
        "gpuplan.http.context",
    ): "`gpuplan daemon --http` serves the HTTP face from the daemon's process",
    (
        "daemon",
        "gpuplan.http.server",
    ): "`gpuplan daemon --http` serves the HTTP face from the daemon's process",
}
#: Faces that are packages: their modules import each other freely.
FACE_PACKAGES = ("gpuplan.http",)

#: Third-party libraries a floor must not import.
FORBIDDEN_LIBRARIES: dict[str, set[str]] = {
    "contract": {"matplotlib", "sqlalchemy", "alembic", "ortools", "sklearn", "lightgbm", "apscheduler"},
    "scheduler": {"matplotlib", "sqlalchemy", "alembic", "apscheduler", "sklearn", "lightgbm"},
    "storage": {"matplotlib", "ortools", "sklearn", "lightgbm", "apscheduler"},
    "features": {"matplotlib", "sqlalchemy", "ortools", "apscheduler"},
    "forecasting": {"matplotlib", "sqlalchemy", "ortools", "apscheduler"},
    "training_data": {"matplotlib", "sqlalchemy", "ortools", "apscheduler"},
    "gpuplan.app": {"matplotlib"},
}

#: Printing belongs to the faces; the floors below them log.
PURE = ("contract", "scheduler", "storage", "features", "forecasting", "training_data", "gpuplan.app")
#: Floors with no script entry point (training_data/ keeps the generators of its bundled files).
NO_MAIN = ("contract", "scheduler", "storage", "gpuplan.app")


@dataclass(frozen=True, slots=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (a project module, or a library's top-level name)
    line: int
    local: bool  # inside a function


def _module_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for top in (*PACKAGES, *TOOLS):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "migrations" in path.parts:  # Alembic's scripts, loaded by path
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            files[name] = path
    for name in TOP_MODULES:
        files[name] = ROOT / f"{name}.py"
    return files


MODULES = _module_files()
PROJECT = {*PACKAGES, *TOP_MODULES, *TOOLS, "tests"}


def _resolve(module: str, name: str | None) -> str:
    """``from module import name``: the submodule when ``name`` is one, else ``module``."""
    if name is not None and f"{module}.{name}" in MODULES:
        return f"{module}.{name}"
    return module


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> Iterator[Import]:
    def visit(node: ast.AST, local: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    yield from visit(other, local)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(module, alias.name, child.lineno, local)
            elif isinstance(child, ast.ImportFrom):
                if child.level:  # relative: the project uses none; count it against its package
                    base = module.rsplit(".", child.level)[0]
                    target = f"{base}.{child.module}" if child.module else base
                else:
                    target = child.module or ""
                for alias in child.names:
                    yield Import(module, _resolve(target, alias.name), child.lineno, local)
            inner = local or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from visit(child, inner)

    yield from visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)


IMPORTS = [imp for module, path in MODULES.items() for imp in _imports(module, path)]


def _floor(module: str) -> str:
    """The floor of a module: the longest key of ALLOWED that is a prefix of it."""
    matches = [f for f in ALLOWED if module == f or module.startswith(f + ".")]
    if not matches:
        raise AssertionError(f"{module} is on no floor: add it to ALLOWED in tests/test_architecture.py")
    return max(matches, key=len)


def _project_target(imp: Import) -> str | None:
    top = imp.target.split(".")[0]
    return imp.target if top in PROJECT else None


def _where(imp: Import) -> str:
    return f"{MODULES[imp.source].relative_to(ROOT)}:{imp.line} imports {imp.target}"


def test_every_module_is_on_a_floor() -> None:
    assert MODULES, "no module found"
    for module in MODULES:
        _floor(module)


def test_each_floor_imports_only_the_floors_below_it() -> None:
    broken = []
    for imp in IMPORTS:
        target = _project_target(imp)
        if target is None:
            continue
        allowed = ALLOWED[_floor(imp.source)]
        target_floor = target if target in ("tests",) else _floor(target) if target in MODULES else target
        if (imp.source, target) in FACE_EXCEPTIONS:
            continue
        if not any(target_floor == a or target_floor.startswith(a + ".") for a in allowed):
            broken.append(f"{_where(imp)} ({_floor(imp.source)} may import {sorted(allowed)})")
    assert broken == []


def test_no_face_imports_another_face() -> None:
    def is_face(module: str) -> bool:
        return module.startswith(FACE_PREFIXES)

    def face_of(module: str) -> str:
        return next((p for p in FACE_PACKAGES if module == p or module.startswith(p + ".")), module)

    broken = [
        _where(imp)
        for imp in IMPORTS
        if is_face(imp.source)
        and is_face(imp.target)
        and face_of(imp.source) != face_of(imp.target)
        and (imp.source, imp.target) not in FACE_EXCEPTIONS
    ]
    assert broken == []


@pytest.mark.parametrize("floor", sorted(FORBIDDEN_LIBRARIES))
def test_a_floor_keeps_off_the_libraries_of_the_floors_above(floor: str) -> None:
    banned = FORBIDDEN_LIBRARIES[floor]
    broken = [
        _where(imp) for imp in IMPORTS if _floor(imp.source) == floor and imp.target.split(".")[0] in banned
    ]
    assert broken == []


def test_the_pure_floors_neither_print_nor_run_as_scripts() -> None:
    broken = []
    for module, path in MODULES.items():
        if not module.startswith(PURE):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                broken.append(f"{path.relative_to(ROOT)}:{node.lineno} calls print")
            is_main = isinstance(node, ast.FunctionDef) and node.name == "main" and node in tree.body
            if is_main and module.startswith(NO_MAIN):
                broken.append(f"{path.relative_to(ROOT)}:{node.lineno} defines main()")
    assert broken == []


def _parents(module: str) -> list[str]:
    """The packages above a module, outermost first: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _graph(imports: list[Import] | None = None, modules: Iterable[str] = MODULES) -> dict[str, set[str]]:
    """Module -> the modules an import of it runs.

    Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so the import is an
    edge to each parent package too, except the importer's own packages (already running).
    """
    known = set(modules)
    graph: dict[str, set[str]] = {module: set() for module in known}
    for imp in IMPORTS if imports is None else imports:
        if imp.target not in known:
            continue
        own = set(_parents(imp.source))
        for target in (*_parents(imp.target), imp.target):
            if target in known and target != imp.source and target not in own:
                graph[imp.source].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_no_import_circles_even_through_function_local_imports() -> None:
    assert _cycles(_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    # The check above can fail: a two-module circle closed by a local import is found.
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert _cycles(graph) == [["a", "b"]]


def test_a_circle_through_a_package_init_is_a_circle() -> None:
    # `q` imports the port `p.base`, which runs `p/__init__` first; that imports the adapter
    # `p.adapter`, which imports `q`: a circle, though no module imports `p` by name.
    imports = [Import("p", "p.adapter", 1, False), Import("p.adapter", "q", 1, False)]
    imports.append(Import("q", "p.base", 1, True))
    graph = _graph(imports, ["p", "p.base", "p.adapter", "q"])
    assert _parents("a.b.c") == ["a", "a.b"]
    assert _cycles(graph) == [["p", "p.adapter", "q"]]
    # a module importing a sibling does not re-run its own package
    assert _graph([Import("p.adapter", "p.base", 1, False)], ["p", "p.base", "p.adapter"])["p.adapter"] == {
        "p.base"
    }


def test_the_walk_sees_local_imports_and_skips_type_checking_ones(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "import contract.errors\n"
        "if TYPE_CHECKING:\n"
        "    import storage.store\n"
        "def f():\n"
        "    from scheduler import lns\n"
    )
    found = {(imp.target, imp.local) for imp in _imports("m", source)}
    assert ("contract.errors", False) in found
    assert ("scheduler.lns", True) in found
    assert not any(target == "storage.store" for target, _ in found)


MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120


def _sized_files() -> list[Path]:
    """Every Python file of the project and its tests and tools, but the storage migrations
    (Alembic's scripts, written once and never edited)."""
    files = [ROOT / f"{name}.py" for name in TOP_MODULES]
    for top in (*PACKAGES, *TOOLS, "tests"):
        files += [path for path in sorted((ROOT / top).rglob("*.py")) if "migrations" not in path.parts]
    return files


def _long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> Iterator[tuple[str, int, int]]:
    """Each function of ``path`` over ``limit`` lines, as its name, first line and length (from
    its ``def`` to its last line, the functions nested in it counted in)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                yield node.name, node.lineno, length


def test_no_source_file_is_over_800_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)} ({lines} lines)"
        for path in _sized_files()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES
    ]
    assert long == []


def test_no_function_is_over_120_lines() -> None:
    long = [
        f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
        for path in _sized_files()
        for name, line, length in _long_functions(path)
    ]
    assert long == []


def test_the_function_length_check_counts_from_def_to_the_last_line(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(4))
    inner = "".join(f"        y{i} = {i}\n" for i in range(4))
    source.write_text(f"def short():\n{body}\n\nasync def long():\n{body}    def inner():\n{inner}")
    assert list(_long_functions(source, limit=5)) == [("long", 8, 10)]
    assert ROOT / "storage" / "migrations" / "env.py" not in _sized_files()
    assert ROOT / "daemon.py" in _sized_files()


def test_daemon_is_the_composition_root_with_one_arrow_in_and_none_back() -> None:
    """daemon.py wires the use cases (and serves the HTTP face); of the project's packages only
    `gpuplan daemon` (gpuplan/cmd_daemon.py) imports it, and the use cases never do."""
    into = {(imp.source, imp.target) for imp in IMPORTS if imp.target == "daemon" and imp.source in MODULES}
    faces = {pair for pair in into if pair[0].split(".")[0] in PACKAGES}
    assert faces == {("gpuplan.cmd_daemon", "daemon")}
    assert not [
        _where(imp) for imp in IMPORTS if imp.target == "daemon" and _floor(imp.source) == "gpuplan.app"
    ]
    back = [
        _where(imp)
        for imp in IMPORTS
        if imp.source == "daemon"
        and (target := _project_target(imp)) is not None
        and not target.startswith(("gpuplan.app.", "gpuplan.http."))
        and target.split(".")[0] not in LOWER
    ]
    assert back == []
