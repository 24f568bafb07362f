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

ROOT = Path(__file__).resolve().parents[2]
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
        raise AssertionError(f"{module} is on no floor: add it to ALLOWED in tests/docs/test_architecture.py")
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


#: The wings of gpuplan/app/, bottom first: a wing may import itself and the wings below it.
#: The modules at gpuplan/app/'s own level (``service``, the package) sit above every wing.
WING_ORDER = ("core", "adapters", "views", "cycle", "jobs", "lab")
WINGS: dict[str, set[str]] = {
    f"gpuplan.app.{wing}": {f"gpuplan.app.{w}" for w in WING_ORDER[: i + 1]}
    for i, wing in enumerate(WING_ORDER)
}
#: Function-local imports of the project in gpuplan/app/ (a ceiling: lower it, never raise it).
MAX_LOCAL_IMPORTS = 17


def _wing(module: str) -> str | None:
    return next((w for w in WINGS if module == w or module.startswith(w + ".")), None)


def _wing_breaks(imports: Iterable[Import]) -> list[str]:
    """Each import from a wing to a wing above it (or to no wing of gpuplan/app/)."""
    broken = []
    for imp in imports:
        source = _wing(imp.source)
        if source is None or not imp.target.startswith("gpuplan.app"):
            continue
        target = _wing(imp.target)
        if target is None or target not in WINGS[source]:
            broken.append(
                f"{imp.source}:{imp.line} imports {imp.target} ({source} may import {sorted(WINGS[source])})"
            )
    return broken


def test_every_app_module_is_in_a_wing() -> None:
    loose = [m for m in MODULES if m.startswith("gpuplan.app.") and _wing(m) is None]
    assert loose == ["gpuplan.app.service"]


def test_each_wing_imports_only_downward() -> None:
    assert _wing_breaks(IMPORTS) == []


def test_the_wing_check_finds_an_upward_import() -> None:
    upward = Import("gpuplan.app.core.bridge", "gpuplan.app.cycle.tick", 3, True)
    downward = Import("gpuplan.app.cycle.tick", "gpuplan.app.core.bridge", 4, False)
    assert _wing_breaks([upward, downward]) == [
        "gpuplan.app.core.bridge:3 imports gpuplan.app.cycle.tick (gpuplan.app.core may import ['gpuplan.app.core'])"
    ]


def test_a_wing_init_imports_nothing() -> None:
    for wing in WINGS:
        assert not [imp for imp in IMPORTS if imp.source == wing], wing


def test_function_local_project_imports_in_app_stay_under_the_ceiling() -> None:
    # statements, not names: `from x import a, b` inside a function counts once
    local = {
        (imp.source, imp.line)
        for imp in IMPORTS
        if imp.source.startswith("gpuplan.app") and imp.local and _project_target(imp)
    }
    assert len(local) <= MAX_LOCAL_IMPORTS


def _misplaced_tests(tests: Path, root: Path) -> list[str]:
    """Test files that do not mirror the code: one at ``tests/``'s top level, one in a folder
    ``P`` for which the repository has no ``P``, ``P.py``, ``gpuplan/P`` or ``gpuplan/P.py``
    (``tests/app/core`` mirrors ``gpuplan/app/core``, ``tests/cli`` the command line,
    ``tests/daemon`` ``daemon.py``, ``tests/docs`` ``docs/``), or one in a folder that is no
    package (without ``__init__.py`` its modules would not be ``tests.P.test_x``)."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        folder = path.parent.relative_to(tests)
        where = path.relative_to(root).as_posix()
        if folder == Path():
            found.append(f"{where}: at the top level of tests/ (move it to the folder of the code it tests)")
            continue
        mirrors = (
            root / folder,
            root / f"{folder}.py",
            root / "gpuplan" / folder,
            root / "gpuplan" / f"{folder}.py",
        )
        if not any(mirror.exists() for mirror in mirrors):
            found.append(f"{where}: tests/{folder.as_posix()} mirrors no package or module")
        elif not all((tests / part / "__init__.py").exists() for part in (folder, *folder.parents[:-1])):
            found.append(f"{where}: tests/{folder.as_posix()} or a folder above it has no __init__.py")
    return found


def test_the_tests_mirror_the_code() -> None:
    assert _misplaced_tests(ROOT / "tests", ROOT) == []


def test_the_layout_check_finds_a_flat_test_and_a_folder_that_mirrors_nothing(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "gpuplan" / "app" / "core").mkdir(parents=True)
    for folder in ("scheduler", "nowhere", "app/core"):
        (tests / folder).mkdir(parents=True)
        (tests / folder / "test_x.py").write_text("")
        (tests / folder / "__init__.py").write_text("")
    (tests / "test_flat.py").write_text("")
    assert _misplaced_tests(tests, tmp_path) == [
        "tests/app/core/test_x.py: tests/app/core or a folder above it has no __init__.py",
        "tests/nowhere/test_x.py: tests/nowhere mirrors no package or module",
        "tests/test_flat.py: at the top level of tests/ (move it to the folder of the code it tests)",
    ]
    (tests / "app" / "__init__.py").write_text("")
    assert len(_misplaced_tests(tests, tmp_path)) == 2
