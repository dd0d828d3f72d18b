"""A sender process for the event tests: ``python -m tests.send_events PREFIX FIRST LAST GO``.

Once set up it prints ``ready`` and waits for the file ``GO`` to exist; then it sends
``PREFIX:FIRST`` … ``PREFIX:LAST-1`` with the payload ``{"i": <number>}``, a random pause of up
to 20 ms before each, and prints ``sent=N`` (how many sends were the first of their name).
Use the ``child_env`` fixture's environment, so the process reaches the test database.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: python -m tests.send_events PREFIX FIRST LAST GO", file=sys.stderr)
        return 2
    prefix, first, last, go = argv[0], int(argv[1]), int(argv[2]), Path(argv[3])
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django_durajobs import send_event

    print("ready", flush=True)
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.005)
    sent = 0
    for number in range(first, last):
        time.sleep(random.uniform(0, 0.02))  # the pace varies, so sends meet waits at every moment
        sent += send_event(f"{prefix}:{number}", {"i": number}, by=f"sender {os.getpid()}")
    print(f"sent={sent}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
