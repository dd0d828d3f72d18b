"""A private PostgreSQL cluster for the restart scenario: its own data folder and port, so its
crashes touch no one else's database. ``scripts/prove`` starts it (``python -m
tests.proving.private_postgres start DIR PORT``), the scenario restarts it (``restart``), and
``scripts/prove`` stops it and deletes the folder (``stop``).

As root (CI) the server runs as the ``postgres`` user, as PostgreSQL requires.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

DATA_ENV = "DURAJOBS_PROVE_PGDATA"


def binaries() -> Path:
    """The newest installed PostgreSQL's programs (initdb, pg_ctl)."""
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda path: int(path.parent.name))
    if not versions:
        raise SystemExit(
            "the PostgreSQL restart scenario needs PostgreSQL's server programs (initdb, pg_ctl)"
        )
    return versions[-1]


def as_server_user(*command: str) -> None:
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, *command], check=True, stdout=subprocess.DEVNULL)


def pg_ctl(data: Path, *args: str) -> None:
    as_server_user(str(binaries() / "pg_ctl"), "-D", str(data / "cluster"), "-w", "-t", "60", *args)


def start(data: Path, port: int) -> None:
    data.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    as_server_user(str(binaries() / "initdb"), "-D", str(data / "cluster"), "-U", "postgres", "--auth=trust")
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=200"
    pg_ctl(data, "-l", str(data / "server.log"), "-o", options, "start")


def restart(data: Path) -> None:
    """Stop the server as a crash would (``immediate``: no checkpoint, no flush) and start it again."""
    pg_ctl(data, "-m", "immediate", "restart")


def stop(data: Path) -> None:
    if (data / "cluster" / "postmaster.pid").exists():
        pg_ctl(data, "-m", "immediate", "stop")
    shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    action, folder, *rest = sys.argv[1:]
    {"start": lambda: start(Path(folder), int(rest[0])), "stop": lambda: stop(Path(folder))}[action]()
