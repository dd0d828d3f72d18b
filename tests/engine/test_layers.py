"""The package's layers, read from its source with ``ast`` (no database, nothing imported).

- Nothing under ``store/`` imports ``engine/``, ``admin``, ``worker``, ``management``, ``cli`` or ``ops``.
- ``engine/`` imports none of ``admin``, ``worker``, ``management`` and ``cli``.
- ``ops`` imports none of ``engine/``, ``draining``, ``worker``, ``admin``, ``management`` and ``cli``:
  the engine calls operations (a parent's revert reverts its children), never the other way round.
- The leaves (``values``, ``redaction``, ``status``, ``transitions``, ``errors``, ``conf``,
  ``schedules``, ``limits``, ``telemetry``) import only each other.
- No module of the package is over 500 lines.

Every import counts: at the top, inside a function, or for type checking only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "django_durajobs"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE
MAX_LINES = 500

#: What each layer must not import: (the modules it covers, the modules they must not reach).
FORBIDDEN = {
    "store": (("store",), ("engine", "admin", "worker", "management", "ops", "cli")),
    "engine": (("engine",), ("admin", "worker", "management", "cli")),
    # The runner reverts a parent's children through the operations: they must not run jobs back.
    "ops": (("ops",), ("engine", "draining", "worker", "admin", "management", "cli")),
}
LEAVES = (
    "values",
    "redaction",
    "status",
    "transitions",
    "errors",
    "conf",
    "schedules",
    "limits",
    "telemetry",
)


@dataclass(frozen=True)
class Import:
    """One import of a module of the package: who imports what, and where."""

    module: str  # as named inside the package: "store.lease", "engine.runner", "ops"
    target: str
    line: int

    def __str__(self) -> str:
        return f"{self.module} imports {self.target} (line {self.line})"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def is_within(module: str, roots: tuple[str, ...]) -> bool:
    return any(module == root or module.startswith(f"{root}.") for root in roots)


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
    problems = []
    for layer, (covered, forbidden) in FORBIDDEN.items():
        problems += [
            f"{layer}: {found}"
            for found in imports
            if is_within(found.module, covered) and is_within(found.target, forbidden)
        ]
    problems += [
        f"leaf: {found}"
        for found in imports
        if is_within(found.module, LEAVES) and not is_within(found.target, LEAVES)
    ]
    return problems


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    found = package_modules()
    assert {"store", "store.lease", "engine.runner", "values", "redaction"} <= set(found)
    return found


def test_no_layer_imports_a_layer_above_it(modules):
    problems = layer_violations(all_imports(modules))
    assert not problems, "Imports against the layers:\n" + "\n".join(problems)


def test_no_module_is_over_500_lines(modules):
    long = {
        name or PACKAGE: lines
        for name, path in modules.items()
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"Modules over {MAX_LINES} lines: {long}"


@pytest.mark.parametrize(
    ("module", "is_package", "source", "expected"),
    [
        pytest.param(
            "store.lease",
            False,
            "from ..engine.runner import execute",
            ["store: store.lease imports engine.runner (line 1)"],
            id="store imports the engine",
        ),
        pytest.param(
            "store",
            True,
            "def later():\n    from .. import ops",
            ["store: store imports ops (line 2)"],
            id="store package imports ops inside a function",
        ),
        pytest.param(
            "engine.describe",
            False,
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import django_durajobs.worker",
            ["engine: engine.describe imports worker (line 3)"],
            id="engine imports the worker for type checking",
        ),
        pytest.param(
            "ops",
            False,
            "def drain():\n    from .engine.runner import execute",
            ["ops: ops imports engine.runner (line 2)"],
            id="the operations run jobs",
        ),
        pytest.param(
            "redaction.secret_keys",
            False,
            "from ..models import Job",
            ["leaf: redaction.secret_keys imports models (line 1)"],
            id="a leaf imports the models",
        ),
        pytest.param(
            "engine.runner",
            False,
            "from ..store import Lease\nfrom ..redaction import redact\nfrom . import context",
            [],
            id="the engine imports the store and a leaf",
        ),
    ],
)
def test_the_check_names_each_offending_module_and_import(module, is_package, source, expected):
    known = {"store", "store.lease", "engine", "engine.runner", "engine.context", "ops", "worker", "models"}
    assert layer_violations(imports_of(module, source, is_package, known)) == expected
