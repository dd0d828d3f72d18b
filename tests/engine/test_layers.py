"""The package's layers, read from its source with ``ast`` (no database, nothing imported).

The layers, lowest first: the leaves (rules and values) -> the models and the registry ->
``store/`` -> ``ops`` -> ``engine/`` -> the glue (``worker``, ``admin/``, ``cli/``, the commands,
``tasks/``, the public API). A module may import its own layer and the layers below it, never one
above: every import counts, at the top, inside a function, or for type checking only. Nor may
imports go round in a circle through modules of more than one folder. No module of the package
is over 500 lines, and no new function over 60 (``LONG_FUNCTIONS``: those written before).

The models and the registry reach the operations above them through the app config
(``registry.facades()``), never by importing them.
"""

from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "django_durajobs"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE
MAX_LINES = 500

#: The layers, lowest first, and the modules (or folders) in each. A module not named here is glue.
LAYERS = (
    (
        "leaves",
        (
            "values",
            "redaction",
            "status",
            "transitions",
            "family",
            "errors",
            "conf",
            "schedules",
            "limits",
            "telemetry",
            "awaitables",
            "answers",
            "signals",
            "routers",
            "indexes",
            "clock",
        ),
    ),
    ("models", ("models", "querysets", "worker_rows", "tallies", "registry", "explain", "migrations")),
    ("store", ("store",)),
    ("ops", ("ops",)),
    ("engine", ("engine",)),
    (
        "glue",
        (
            "admin",
            "management",
            "cli",
            "worker",
            "event_loop",
            "stop_signals",
            "draining",
            "testing",
            "metrics",
            "tasks",
            "checks",
            "apps",
            "templatetags",
            "async_ops",
            "facades",
        ),
    ),
)
GLUE = len(LAYERS) - 1


@dataclass(frozen=True)
class Import:
    """One import of a module of the package: who imports what, and where."""

    module: str  # as named inside the package: "store.lease", "engine.runner", "ops"
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.module} imports {self.target} (line {self.line})"


def module_name(path: Path, package_dir: Path) -> str:
    parts = path.relative_to(package_dir).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    return {module_name(path, package_dir): path for path in sorted(package_dir.rglob("*.py"))}


def is_within(module: str, root: str) -> bool:
    return module == root or module.startswith(f"{root}.")


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of the layer ``module`` belongs to (glue when none names it)."""
    for index, (_name, roots) in enumerate(LAYERS):
        if any(is_within(module, root) for root in roots):
            return index
    return GLUE


def folder_of(module: str, is_package: bool) -> str:
    """The folder a module's file is in, as a module name: "" for the package's own."""
    return module if is_package else module.rpartition(".")[0]


def imports_of(module: str, source: str, is_package: bool, known: set[str]) -> list[Import]:
    """The modules of the package that ``source`` (the module ``module``) imports."""
    # The package a relative import starts from: the module itself when it is a package.
    here = module.split(".") if module else []
    if not is_package:
        here = here[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            targets = [name.partition(".")[2] for name in names if name.split(".")[0] == PACKAGE]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: max(len(here) - node.level + 1, 0)]
                base += node.module.split(".") if node.module else []
            elif node.module and node.module.split(".")[0] == PACKAGE:
                base = node.module.split(".")[1:]
            else:
                continue
            start = ".".join(base)
            # "from . import sql" names a module; "from .models import Job" a name in one.
            targets = [
                f"{start}.{alias.name}" if f"{start}.{alias.name}".strip(".") in known else start
                for alias in node.names
            ]
            targets = [target.strip(".") for target in targets]
        else:
            continue
        found += [Import(module, target, node.lineno) for target in dict.fromkeys(targets) if target]
    return found


def all_imports(modules: dict[str, Path]) -> list[Import]:
    known = set(modules)
    return [
        found
        for module, path in modules.items()
        for found in imports_of(module, path.read_text(), path.name == "__init__.py", known)
    ]


def layer_violations(imports: list[Import]) -> list[str]:
    """Each import of a module in a higher layer than the importer's."""
    return [
        f"{found}: {LAYERS[layer_of(found.module)][0]} may not import {LAYERS[layer_of(found.target)][0]}"
        for found in imports
        if layer_of(found.target) > layer_of(found.module)
    ]


def circles(imports: list[Import]) -> list[list[str]]:
    """The import circles: the strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for found in imports:
        graph.setdefault(found.module, set()).add(found.target)
        graph.setdefault(found.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found_circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1:
                found_circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found_circles


def circles_across_folders(imports: list[Import], packages: set[str]) -> list[str]:
    """The circles whose modules are in more than one folder (``packages``: the modules that are
    folders' ``__init__``)."""
    return [
        " -> ".join(circle)
        for circle in circles(imports)
        if len({folder_of(module, module in packages) for module in circle}) > 1
    ]


def packages_of(modules: dict[str, Path]) -> set[str]:
    return {name for name, path in modules.items() if path.name == "__init__.py"}


#: Functions longer than ``MAX_FUNCTION_LINES``: the transitions table, and those written before the
#: limit, to be shortened (``EnqueueOptions`` and ``ClaimRequest`` will shorten the enqueue and the claim).
LONG_FUNCTIONS = {
    "transitions._entries",  # the table itself, one entry after another
    "checks.check_settings",
    "management.commands.jobs.add_arguments",
    "registry.job",
    "schedules.checked_spec",
    "store.enqueuing._checked_fields",
    "store.lease.finish",
}
MAX_FUNCTION_LINES = 60


def long_functions(modules: dict[str, Path]) -> dict[str, int]:
    """Each function (or method, by its own name) over ``MAX_FUNCTION_LINES``, with its length."""
    found = {}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[f"{name}.{node.name}"] = lines
    return found


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    found = package_modules()
    assert {"store", "store.lease", "engine.runner", "values", "redaction", "models", "facades"} <= set(found)
    return found


@pytest.fixture(scope="module")
def imports(modules) -> list[Import]:
    return all_imports(modules)


def test_no_module_imports_a_layer_above_its_own(imports):
    problems = layer_violations(imports)
    assert not problems, "Imports against the layers:\n" + "\n".join(problems)


def test_no_import_circle_crosses_a_folder(modules, imports):
    problems = circles_across_folders(imports, packages_of(modules))
    assert not problems, "Import circles across folders:\n" + "\n".join(problems)


def test_no_module_is_over_500_lines(modules):
    long = {
        name or PACKAGE: lines
        for name, path in modules.items()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"Modules over {MAX_LINES} lines: {long}"


def test_no_new_function_is_over_60_lines(modules):
    found = long_functions(modules)
    assert set(found) - LONG_FUNCTIONS == set(), f"Functions over {MAX_FUNCTION_LINES} lines: {found}"


def test_a_long_function_planted_in_a_copy_of_the_package_is_found(tmp_path):
    (tmp_path / "planted.py").write_text("def long():\n" + "    pass\n" * MAX_FUNCTION_LINES)
    assert long_functions(package_modules(tmp_path)) == {"planted.long": MAX_FUNCTION_LINES + 1}


def test_every_folder_and_module_named_in_the_layers_exists(modules):
    named = {root for _name, roots in LAYERS for root in roots}
    assert not {root for root in named if root not in modules}


@pytest.mark.parametrize(
    ("module", "is_package", "source", "expected"),
    [
        pytest.param(
            "store.lease",
            False,
            "from ..engine.runner import execute",
            ["store.lease imports engine.runner (line 1): store may not import engine"],
            id="store imports the engine",
        ),
        pytest.param(
            "store",
            True,
            "def later():\n    from .. import ops",
            ["store imports ops (line 2): store may not import ops"],
            id="store package imports ops inside a function",
        ),
        pytest.param(
            "models",
            False,
            "class Job:\n    def resume(self):\n        from . import ops",
            ["models imports ops (line 3): models may not import ops"],
            id="a model's method imports the operations lazily",
        ),
        pytest.param(
            "registry",
            False,
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .engine.context import JobContext",
            ["registry imports engine.context (line 3): models may not import engine"],
            id="the registry imports the engine for type checking",
        ),
        pytest.param(
            "signals",
            False,
            "def announce():\n    from .models import Job",
            ["signals imports models (line 2): leaves may not import models"],
            id="a leaf imports the models lazily",
        ),
        pytest.param(
            "ops",
            False,
            "def drain():\n    from .engine.runner import execute",
            ["ops imports engine.runner (line 2): ops may not import engine"],
            id="the operations run jobs",
        ),
        pytest.param(
            "engine.describe",
            False,
            "import django_durajobs.worker",
            ["engine.describe imports worker (line 1): engine may not import glue"],
            id="the engine imports the worker",
        ),
        pytest.param(
            "engine.runner",
            False,
            "from ..store import Lease\nfrom ..redaction import redact\nfrom . import context",
            [],
            id="the engine imports the store and a leaf",
        ),
        pytest.param(
            "facades",
            False,
            "from .ops import resume\nfrom .engine.describe import describe",
            [],
            id="the glue imports the operations and the engine",
        ),
    ],
)
def test_the_check_names_each_offending_module_and_import(module, is_package, source, expected):
    known = {"store", "store.lease", "engine", "engine.runner", "engine.context", "ops", "worker", "models"}
    assert layer_violations(imports_of(module, source, is_package, known)) == expected


def test_a_circle_across_folders_is_found_and_one_within_a_folder_is_not():
    imports = [
        Import("engine.context", "engine.events", 1),
        Import("engine.events", "engine.context", 1),
        Import("worker", "tasks.running", 1),
        Import("tasks.running", "tasks.backend", 1),
        Import("tasks.backend", "worker", 1),
    ]
    assert circles_across_folders(imports, packages={"tasks", "engine"}) == [
        "tasks.backend -> tasks.running -> worker"
    ]


def test_a_lazy_upward_import_planted_in_a_copy_of_the_package_fails_the_check(tmp_path):
    copy = tmp_path / PACKAGE
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("locale", "static", "templates"))
    with (copy / "models.py").open("a") as models:
        models.write("\n\ndef planted():\n    from .engine.describe import describe\n")
    with (copy / "store" / "family.py").open("a") as family:
        family.write("\n\ndef planted():\n    from ..admin import display\n")
    modules = package_modules(copy)
    imports = all_imports(modules)

    problems = layer_violations(imports)
    assert [problem.split(" (line")[0] for problem in problems] == [
        "models imports engine.describe",
        "store.family imports admin.display",
    ]
    assert circles_across_folders(imports, packages_of(modules))
