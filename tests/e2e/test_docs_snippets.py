"""The code blocks of README.md and docs/ that a user would paste, and the names the docs give.

Each such block is either run where the docs say (``<!-- run by PATH -->`` on the line before it:
PATH reads the block out of its page and runs it, as tests/e2e/test_readme.py and
scripts/check-quickstart do) or marked ``<!-- excerpt -->``: part of a larger program, shown to
explain. Either way the names the docs give must exist: what their Python imports, the dotted
paths, ``DURAJOBS`` settings, ``ctx`` members, extras, permissions and ``manage.py`` commands.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import get_commands

from django_durajobs.conf import DEFAULTS
from django_durajobs.engine.async_context import AsyncJobContext
from django_durajobs.engine.context import JobContext
from django_durajobs.management.commands.jobs import Command as JobsCommand
from django_durajobs.models import Job, Schedule, Worker
from tests.helpers import REPO_ROOT

PAGES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
#: Languages of what a user pastes; the other blocks are output, layouts and diagrams.
PASTED = {"python", "sh", "bash", "ini", "yaml", "toml"}
BLOCK = re.compile(
    r"^(?:<!-- (?P<mark>[^\n]*?) -->\n)?```(?P<language>[\w-]*)\n(?P<code>.*?)^```$", re.M | re.S
)
RUN_BY = re.compile(r"run by (?P<runner>\S+)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    code: str
    mark: str

    def __str__(self) -> str:
        page = self.page.relative_to(REPO_ROOT) if self.page.is_relative_to(REPO_ROOT) else self.page
        return f"{page}:{self.line}"


def blocks_of(page: Path, text: str | None = None) -> list[Block]:
    text = page.read_text(encoding="utf-8") if text is None else text
    return [
        Block(
            page,
            text.count("\n", 0, found.start("language")) + 1,
            found["language"],
            found["code"],
            found["mark"] or "",
        )
        for found in BLOCK.finditer(text)
    ]


BLOCKS = [block for page in PAGES for block in blocks_of(page)]
PYTHON = [block for block in BLOCKS if block.language == "python"]
TEXT = {page: page.read_text(encoding="utf-8") for page in PAGES}


def unmarked(blocks: list[Block]) -> list[str]:
    return [
        str(block)
        for block in blocks
        if block.language in PASTED and block.mark != "excerpt" and not RUN_BY.fullmatch(block.mark)
    ]


def test_every_block_a_user_would_paste_is_run_or_marked_an_excerpt():
    assert unmarked(BLOCKS) == []


def test_a_block_neither_run_nor_marked_is_found(tmp_path):
    page = tmp_path / "page.md"
    text = (
        "<!-- excerpt -->\n```python\nx = 1\n```\n\n"
        "```sh\npython manage.py migrate\n```\n\n"  # neither run nor marked
        "```text\nout\n```\n"  # output: nobody pastes it
    )
    assert unmarked(blocks_of(page, text)) == [f"{page}:6"]


@pytest.mark.parametrize("block", [b for b in BLOCKS if RUN_BY.fullmatch(b.mark)], ids=str)
def test_the_runner_of_a_block_reads_its_page(block):
    runner = REPO_ROOT / RUN_BY.fullmatch(block.mark)["runner"]
    assert runner.is_file(), f"{block}: {runner} does not exist"
    assert block.page.name in runner.read_text(encoding="utf-8"), (
        f"{block}: {runner} never reads {block.page.name}"
    )


def imported_names(code: str) -> list[tuple[str, str | None]]:
    """(module, name) for each import of Django or this package in ``code``; name None for ``import m``."""
    try:
        tree = ast.parse(code)
    except SyntaxError:  # an excerpt of a call or a dict: its import lines still parse
        lines = [line for line in code.splitlines() if line.startswith(("from ", "import "))]
        tree = ast.parse("\n".join(lines))
    names: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            names += [(alias.name, None) for alias in node.names]
    return [(module, name) for module, name in names if module.split(".")[0] in ("django", "django_durajobs")]


#: Modules the docs import that Django 5.2 has from a backport of the name the docs give.
BACKPORTS = {"django.tasks": "django_tasks"}


def missing_import(module: str, name: str | None) -> bool:
    try:
        imported = importlib.import_module(module)
    except ImportError:
        if module in BACKPORTS:
            return missing_import(BACKPORTS[module], name)
        return True
    if name is None or hasattr(imported, name):
        return False
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return True
    return False


def test_what_the_docs_import_exists():
    missing = [
        f"{block}: from {module} import {name}"
        for block in PYTHON
        for module, name in imported_names(block.code)
        if missing_import(module, name)
    ]
    assert missing == []


def permissions() -> set[str]:
    """``django_durajobs.<codename>`` of every permission of the app's models."""
    codenames = set()
    for model in (Job, Schedule, Worker):
        meta = model._meta
        codenames |= {f"{action}_{meta.model_name}" for action in meta.default_permissions}
        codenames |= {codename for codename, _ in meta.permissions}
    return {f"django_durajobs.{codename}" for codename in codenames}


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module of the package or something in one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


@pytest.mark.parametrize(
    ("dotted", "exists"),
    [
        ("django_durajobs.testing.run_job", True),
        ("django_durajobs.tasks.DurableBackend", True),
        ("django_durajobs.testing.run_jobs_gone", False),
        ("django_durajobs.no_such_module.thing", False),
    ],
)
def test_a_dotted_name_that_no_longer_exists_is_found(dotted, exists):
    assert resolves(dotted) is exists


def test_the_dotted_names_the_docs_give_exist():
    granted = permissions()
    missing = [
        f"{page.name}: {dotted}"
        for page, text in TEXT.items()
        for dotted in sorted(set(re.findall(r"\bdjango_durajobs(?:\.[A-Za-z_]\w*)+", text)))
        if dotted not in granted and not resolves(dotted)
    ]
    assert missing == []


def test_the_settings_the_docs_name_exist():
    named = {
        (page.name, setting)
        for page, text in TEXT.items()
        for setting in re.findall(r"DURAJOBS\[[\"'](\w+)[\"']\]", text)
    }
    for block in PYTHON:
        for node in ast.walk(ast.parse(block.code)) if _parses(block.code) else ():
            if isinstance(node, ast.Assign) and any(
                getattr(t, "id", None) == "DURAJOBS" for t in node.targets
            ):
                assert isinstance(node.value, ast.Dict), block
                named |= {
                    (block.page.name, key.value) for key in node.value.keys if isinstance(key, ast.Constant)
                }
    assert sorted((page, setting) for page, setting in named if setting not in DEFAULTS) == []


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except SyntaxError:
        return False
    return True


def has_member(name: str) -> bool:
    """Whether a job's context (sync or async) has ``name``: a method, property or attribute it sets."""
    return any(
        hasattr(context, name) or re.search(rf"self\.{name}\b[^=\n]*=", inspect.getsource(context))
        for context in (JobContext, AsyncJobContext)
    )


def test_the_ctx_members_the_docs_use_exist():
    missing = {
        f"{page.name}: ctx.{name}"
        for page, text in TEXT.items()
        for name in re.findall(r"\bctx\.([a-z_]\w*)", text)
        if not has_member(name)
    }
    assert sorted(missing) == []


def test_the_extras_the_docs_name_exist():
    extras = set(
        tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    named = {
        (page.name, extra.strip())
        for page, text in TEXT.items()
        for group in re.findall(r"django-durajobs\[([\w, ]+)\]", text)
        for extra in group.split(",")
    }
    assert sorted((page, extra) for page, extra in named if extra not in extras) == []


def jobs_subcommands() -> set[str]:
    parser = JobsCommand().create_parser("manage.py", "jobs")
    [subparsers] = [action for action in parser._actions if action.dest == "command"]
    return set(subparsers.choices)


def test_the_management_commands_the_docs_run_exist():
    commands, subcommands = set(get_commands()), jobs_subcommands()
    missing = set()
    for page, text in TEXT.items():
        for command, argument in re.findall(r"manage\.py (\w+)(?: (\w+))?", text):
            if command not in commands:
                missing.add(f"{page.name}: manage.py {command}")
            elif command == "jobs" and argument and argument not in subcommands:
                missing.add(f"{page.name}: manage.py jobs {argument}")
    assert sorted(missing) == []
