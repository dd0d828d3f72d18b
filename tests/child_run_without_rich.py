"""``python -m tests.child_run_without_rich ARGS``: ``manage.py ARGS`` where ``import rich`` fails,
as where django-durajobs' ``cli`` extra is not installed."""

from __future__ import annotations

import sys

sys.modules["rich"] = None  # type: ignore[assignment]  # makes every "import rich…" raise ImportError

from django.core.management import execute_from_command_line  # noqa: E402

execute_from_command_line(["manage.py", *sys.argv[1:]])
