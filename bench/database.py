"""The benchmark's own database: where it lives, how to make it fresh, how Django connects to it.

The benchmark never touches a database it did not create. On PostgreSQL and MariaDB/MySQL the URL
names a server (and a database to connect to for maintenance); the benchmark drops and creates
``durajobs_bench`` there (or the name in ``DURAJOBS_BENCH_DATABASE``, so that two runs can share
a server). SQLite always gets a new file in a temporary directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from urllib.parse import unquote, urlsplit

BENCH_DATABASE = os.environ.get("DURAJOBS_BENCH_DATABASE", "durajobs_bench")
if not BENCH_DATABASE.isidentifier():
    raise SystemExit(
        f"DURAJOBS_BENCH_DATABASE must be a plain name (letters, digits, _), not {BENCH_DATABASE!r}"
    )
VENDORS = {"postgres": "postgresql", "postgresql": "postgresql", "mysql": "mysql", "sqlite": "sqlite"}
#: The bench process hands the database to its settings (and to the worker processes it starts) here.
URL_VARIABLE = "BENCH_DATABASE_URL"
#: Set: the workers it starts prepare no statements (``DURAJOBS["PREPARED_STATEMENTS"] = False``).
UNPREPARED_VARIABLE = "BENCH_UNPREPARED"


@dataclass(frozen=True)
class Target:
    """A parsed database URL, with the vendor named as Django names it (``connection.vendor``)."""

    vendor: str
    name: str
    host: str = ""
    port: int | None = None
    user: str = ""
    password: str = ""

    @classmethod
    def parse(cls, url: str) -> Target:
        parts = urlsplit(url)
        vendor = VENDORS.get(parts.scheme)
        if vendor is None:
            raise ValueError(f"Unsupported database URL {url!r}: use postgres://, mysql:// or sqlite://.")
        if vendor == "sqlite":
            return cls(vendor="sqlite", name=unquote(parts.path))
        return cls(
            vendor=vendor,
            name=unquote(parts.path.lstrip("/")) or ("postgres" if vendor == "postgresql" else ""),
            host=parts.hostname or "127.0.0.1",
            port=parts.port,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
        )

    @property
    def url(self) -> str:
        """The URL again (the password included: it goes to our own child processes only)."""
        if self.vendor == "sqlite":
            return f"sqlite://{self.name}"
        scheme = "postgres" if self.vendor == "postgresql" else "mysql"
        credentials = self.user + (f":{self.password}" if self.password else "")
        port = f":{self.port}" if self.port else ""
        return f"{scheme}://{credentials}@{self.host}{port}/{self.name}"

    @property
    def shown(self) -> str:
        """The URL without its password, for the report."""
        return replace(self, password="***" if self.password else "").url


def django_settings(target: Target) -> dict:
    """``DATABASES["default"]`` for ``target``, configured the way the test suite configures it.

    ``CONN_MAX_AGE`` stays at Django's default of 0: a worker must keep its connections anyway.
    SQLite gets WAL, ``synchronous=NORMAL`` and ``BEGIN IMMEDIATE`` so that several processes
    can write; the raw queue uses the same pragmas, so the comparison is like for like.
    """
    if target.vendor == "sqlite":
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": target.name,
            "OPTIONS": {
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
            },
        }
    settings = {
        "NAME": target.name,
        "HOST": target.host,
        "PORT": str(target.port or ""),
        "USER": target.user,
        "PASSWORD": target.password,
    }
    if target.vendor == "postgresql":
        return {"ENGINE": "django.db.backends.postgresql", **settings}
    return {
        "ENGINE": "django.db.backends.mysql",
        **settings,
        "OPTIONS": {"charset": "utf8mb4", "isolation_level": "read committed"},
    }


def create_fresh(server: Target) -> Target:
    """Drop and create the benchmark's database on ``server``; returns where it now is."""
    if server.vendor == "sqlite":
        directory = tempfile.mkdtemp(prefix="durajobs-bench-")
        return Target(vendor="sqlite", name=os.path.join(directory, f"{BENCH_DATABASE}.sqlite3"))
    if server.vendor == "postgresql":
        import psycopg

        with psycopg.connect(**postgres_params(server), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {BENCH_DATABASE}")
    else:
        conn = mysql_connect(replace(server, name=""))
        try:
            cursor = conn.cursor()
            cursor.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE}")
            cursor.execute(f"CREATE DATABASE {BENCH_DATABASE} CHARACTER SET utf8mb4")
        finally:
            conn.close()
    return replace(server, name=BENCH_DATABASE)


def drop(server: Target, bench: Target) -> None:
    """Remove the benchmark's database again: a million finished jobs take disk space."""
    if bench.vendor == "sqlite":
        shutil.rmtree(os.path.dirname(bench.name), ignore_errors=True)
    elif bench.vendor == "postgresql":
        import psycopg

        with psycopg.connect(**postgres_params(server), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE} WITH (FORCE)")
    else:
        conn = mysql_connect(replace(server, name=""))
        try:
            conn.cursor().execute(f"DROP DATABASE IF EXISTS {BENCH_DATABASE}")
        finally:
            conn.close()


def postgres_params(target: Target) -> dict:
    """``psycopg.connect()`` keyword arguments for ``target``."""
    params = {"host": target.host, "dbname": target.name, "user": target.user, "password": target.password}
    if target.port:
        params["port"] = target.port
    return {key: value for key, value in params.items() if value}


def mysql_connect(target: Target, **extra):
    """A MySQLdb connection to ``target`` (no database selected when its name is empty)."""
    import MySQLdb

    params = {"host": target.host, "user": target.user, "passwd": target.password, "charset": "utf8mb4"}
    if target.port:
        params["port"] = target.port
    if target.name:
        params["database"] = target.name
    return MySQLdb.connect(**params, **extra)


def rows_sql(vendor: str, table: str, columns: list[str], values: list[str], count: int) -> str:
    """One ``INSERT … SELECT`` that adds ``count`` rows of ``values`` to ``table``.

    Each database has its own cheapest row generator: ``generate_series`` on PostgreSQL, a
    recursive CTE on SQLite, a cross join of digit tables (cut with ``LIMIT``) on MariaDB/MySQL.
    """
    insert = f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)}"
    if vendor == "postgresql":
        return f"{insert} FROM generate_series(1, {int(count)})"
    if vendor == "sqlite":
        counter = f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {int(count)})"
        return f"{counter} {insert} FROM n"
    digits = "(SELECT 0 AS d UNION ALL " + " UNION ALL ".join(f"SELECT {d}" for d in range(1, 10)) + ")"
    width = max(1, len(str(max(count - 1, 0))))
    joined = " CROSS JOIN ".join(f"{digits} AS d{place}" for place in range(width))
    return f"{insert} FROM {joined} LIMIT {int(count)}"
