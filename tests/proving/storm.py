"""One process of the idempotency storm: ``python -m tests.proving.storm OUT GO KEYS THREADS SEED``.

Once Django is set up it writes OUT.ready; its threads wait for the file GO, then each enqueues
every one of KEYS idempotency keys in an order of its own. About one call in ten does it inside a
transaction that it then rolls back (a first enqueuer that never commits). Each call appends
``{"key", "id", "kept", "error"}`` to OUT: ``kept`` is false for the rolled-back calls, ``error``
names any exception that reached the caller.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from pathlib import Path

ROLLED_BACK_SHARE = 0.1


class RolledBack(Exception):
    """Raised inside a transaction to roll it back."""


def enqueue_keys(keys: list[str], rng: random.Random, out: list[dict]) -> None:
    from django.db import connection, transaction

    from django_durajobs import enqueue

    for key in rng.sample(keys, len(keys)):
        keep = rng.random() >= ROLLED_BACK_SHARE
        outcome = {"key": key, "id": None, "kept": keep, "error": None}
        try:
            if keep:
                outcome["id"] = enqueue("prove_steps", idempotency_key=key)[0].pk
            else:
                with transaction.atomic():
                    outcome["id"] = enqueue("prove_steps", idempotency_key=key)[0].pk
                    time.sleep(rng.uniform(0, 0.01))  # hold the key a moment, then give it up
                    raise RolledBack
        except RolledBack:
            pass
        except Exception as error:  # noqa: BLE001 - the storm reports whatever reached the caller
            outcome["error"] = f"{type(error).__name__}: {error}"
        out.append(outcome)
    connection.close()


def main(out_path: str, go_path: str, keys: str, threads: str, seed: str) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    names = [f"storm:{n}" for n in range(int(keys))]
    Path(f"{out_path}.ready").touch()
    while not Path(go_path).exists():
        time.sleep(0.01)
    outcomes: list[dict] = []
    workers = [
        threading.Thread(target=enqueue_keys, args=(names, random.Random(f"{seed}:{n}"), outcomes))
        for n in range(int(threads))
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    Path(out_path).write_text("".join(json.dumps(outcome) + "\n" for outcome in outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
