"""A worker process for tests that kill workers: ``python -m tests.child_run drain|recover``.

``drain`` runs the due jobs (``django_durajobs.drain()``); ``recover`` first re-queues the jobs of
lost workers (``django_durajobs.recover()``), then drains. It prints ``recovered=N`` and
``ran=N``, flushed at once, so a test can read them even from a process it killed. Use the
``child_env`` fixture's environment, so the process reaches the test database.
"""

from __future__ import annotations

import os
import sys

COMMANDS = ("drain", "recover")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in COMMANDS:
        print(f"usage: python -m tests.child_run {'|'.join(COMMANDS)}", file=sys.stderr)
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    import django_durajobs

    if argv[0] == "recover":
        print(f"recovered={django_durajobs.recover()}", flush=True)
    print(f"ran={django_durajobs.drain()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
