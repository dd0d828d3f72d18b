"""Benchmark django-durajobs against a minimal raw-SQL queue, on the same database in the same run.

    python bench/run.py                      # SQLite, a file in a temporary directory
    python bench/run.py --database postgres://postgres@127.0.0.1:5432/postgres
    python bench/run.py --database mysql://root@127.0.0.1:3306/mysql
    python bench/run.py --quick              # every workload, small: a smoke run (CI)
    python bench/run.py --workload fleet ... # only when named: 1-8 worker processes (bench/fleet.py)

On PostgreSQL and MariaDB/MySQL the URL names the server (and a database to connect to for
maintenance): the benchmark creates ``durajobs_bench`` there, fresh, and drops it at the end.
It prints a table (Markdown) and writes the figures as JSON (``--json``, by default
``bench/results/<vendor>-<time>.json``). Exit status 1 if a workload failed.
See docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
import traceback
from datetime import datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# With --check-targets, a workload whose figures miss runs again, up to this many runs in all: a
# slower run is noise on a shared machine, a path that misses every time is broken.
RUNS_BEFORE_A_MISS_COUNTS = 3
sys.path.insert(0, str(REPO_ROOT))  # this checkout's django_durajobs and bench, not an installed copy

from bench.database import URL_VARIABLE, Target, create_fresh, drop  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="See docs/performance.md and the top of bench/run.py."
    )
    parser.add_argument(
        "--database",
        default="sqlite://",
        metavar="URL",
        help="postgres://…, mysql://… or sqlite:// (the default: a temporary file)",
    )
    parser.add_argument("--quick", action="store_true", help="every workload, small (under a minute)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="where to write the figures")
    parser.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="NAME",
        help="only this workload (repeatable); fleet runs only when named",
    )
    parser.add_argument(
        "--check-targets",
        action="store_true",
        help="exit 1 when a figure misses half its target twice (bench/targets.py): a broken path, not noise",
    )
    args = parser.parse_args(argv)
    try:
        args.server = Target.parse(args.database)
    except ValueError as exc:
        parser.error(str(exc))
    if args.server.vendor == "sqlite" and args.server.name:
        parser.error("SQLite: the benchmark uses a file of its own in a temporary directory; pass sqlite://")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now()
    target = create_fresh(args.server)
    os.environ[URL_VARIABLE] = target.url  # for bench.settings, here and in the workers we start
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    try:
        figures, failures, meta = run_workloads(args, target)
    finally:
        drop(args.server, target)
    meta["seconds"] = round((datetime.now() - started).total_seconds())

    from bench.report import table, write_json

    print()
    print(table(figures))
    for name, error in failures.items():
        print(f"\nFAILED: {name}\n{error}", file=sys.stderr)
    path = args.json or REPO_ROOT / "bench" / "results" / f"{target.vendor}-{started:%Y%m%d-%H%M%S}.json"
    write_json(path, meta, figures, failures)
    print(f"\nJSON: {path}")
    missed = check_targets(target.vendor, figures, args.quick) if args.check_targets else []
    return 1 if failures or missed else 0


def check_targets(vendor: str, figures: list, quick: bool) -> list[str]:
    from bench.targets import missed_by_half

    missed = missed_by_half(vendor, figures, quick=quick)
    for line in missed:
        print(f"MISSED: {line}", file=sys.stderr)
    return missed


def run_workloads(args: argparse.Namespace, target: Target) -> tuple[list, dict[str, str], dict]:
    """Set Django up on the fresh database, migrate, and run every workload.

    A workload that fails is recorded and the next one runs on new connections.
    """
    import django
    from django.core.management import call_command
    from django.db import connections

    django.setup()
    call_command("migrate", verbosity=0)

    from bench.harness import FULL, QUICK, Bench  # imports models: only once Django is set up
    from bench.rawqueue import open_raw_queue
    from bench.targets import missed_by_half
    from bench.workloads import WHEN_NAMED, WORKLOADS

    raw = open_raw_queue(target)
    raw.create_table()
    bench = Bench(target, raw, QUICK if args.quick else FULL)
    meta = describe_run(args, target, bench)
    run = "quick" if args.quick else "full"
    load = ", ".join(f"{value:.1f}" for value in meta["load_average"])
    print(f"django-durajobs benchmark on {meta['database']}: {run} run, {meta['cpus']} CPUs, load {load}")
    figures, failures = [], {}
    try:
        for workload in chosen(WORKLOADS, args.workload, WHEN_NAMED):
            name = workload.__name__
            print(f"  {name} …", end=" ", flush=True)
            start = time.monotonic()
            try:
                measured = workload(bench)
                for _ in range(RUNS_BEFORE_A_MISS_COUNTS - 1):
                    if not (args.check_targets and missed_by_half(target.vendor, measured, quick=args.quick)):
                        break
                    print("missed a target; again …", end=" ", flush=True)
                    measured = workload(bench)
                figures += measured
            except Exception:
                failures[name] = traceback.format_exc()
                print("FAILED", flush=True)
                bench.reconnect()
                continue
            print(f"{time.monotonic() - start:.0f} s", flush=True)
    finally:
        bench.raw.close()
        connections.close_all()
    return figures, failures, meta


def chosen(workloads: tuple, named: list[str], when_named: tuple) -> list:
    """The workloads named, in their order; none named: all but those run only when named."""
    if named:
        return [workload for workload in workloads if workload.__name__ in named]
    return [workload for workload in workloads if workload not in when_named]


def describe_run(args: argparse.Namespace, target: Target, bench) -> dict:
    """What the figures were measured on and with, for the JSON."""
    import django
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT sqlite_version()" if target.vendor == "sqlite" else "SELECT version()")
        server_version = cursor.fetchone()[0]

    def git(*command: str) -> str:
        result = subprocess.run(["git", *command], cwd=REPO_ROOT, capture_output=True, text=True)
        return result.stdout.strip()

    return {
        "vendor": target.vendor,
        "database": f"{target.vendor} {server_version.split(' on ')[0]}",
        "url": args.server.shown,
        "quick": args.quick,
        "sizes": vars(bench.sizes),
        "started": datetime.now().isoformat(timespec="seconds"),
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted_changes": bool(git("status", "--porcelain", "--", "django_durajobs")),
        "python": platform.python_version(),
        "django": django.get_version(),
        "cpus": os.cpu_count(),
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }


if __name__ == "__main__":
    sys.exit(main())
