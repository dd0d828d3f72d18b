"""The ceiling: the smallest queue that still claims safely, written straight against the driver.

One table ``bench_raw_queue(id, payload, status, run_at)`` with an index on ``(status, run_at)``,
one connection in autocommit, no framework. A claim is a single statement where the database
allows it (PostgreSQL, SQLite), else the shortest transaction that locks one row (MariaDB/MySQL);
finishing is one ``UPDATE``. Whatever django-durajobs does per job on top of this is overhead.

Jobs with steps have a durable ceiling of their own: the same loop with one checkpoint per step,
an ``INSERT`` into ``bench_raw_steps(job_id, position, result)`` committed on its own.
"""

from __future__ import annotations

import json
import sqlite3
import time

from bench.database import Target, mysql_connect, postgres_params, rows_sql

TABLE = "bench_raw_queue"
STEPS_TABLE = "bench_raw_steps"


class RawQueue:
    """The common loop; each vendor supplies its SQL and how to talk to its driver."""

    vendor: str
    placeholder = "%s"
    create_sql: tuple[str, ...]
    clear_sql = f"DELETE FROM {TABLE}"
    now_sql: str  # what run_at is compared with and filled from
    begin_sql: str

    def __init__(self, target: Target) -> None:
        self.conn = self.connect(target)

    def connect(self, target: Target):
        raise NotImplementedError

    def payload(self, n: int):
        """The job's arguments, as the driver takes a JSON value."""
        return json.dumps({"n": n})

    def execute(self, sql: str, params=()):
        cursor = self.conn.cursor()
        cursor.execute(sql, params)
        return cursor

    def create_table(self) -> None:
        for sql in self.create_sql:
            self.execute(sql)

    def clear(self) -> None:
        self.execute(self.clear_sql)
        self.execute(f"DELETE FROM {STEPS_TABLE}")

    @property
    def insert_sql(self) -> str:
        p = self.placeholder
        return f"INSERT INTO {TABLE} (payload, status, run_at) VALUES ({p}, 'queued', {self.now_sql})"

    def insert_one(self, n: int) -> None:
        """Enqueue one job: one INSERT, committed on its own (autocommit)."""
        self.execute(self.insert_sql, (self.payload(n),))

    def insert_many(self, numbers: range) -> None:
        """Enqueue a batch: one ``executemany`` in one transaction, as the driver does it best."""
        self.begin()
        self.conn.cursor().executemany(self.insert_sql, [(self.payload(n),) for n in numbers])
        self.commit()

    def insert_returning_ids(self, sql: str, rows: list, table: str) -> list[int]:
        """``executemany`` of ``rows`` into ``table``, then their new ids, ascending: the ids above
        the largest before (in the caller's transaction, the only writer)."""
        [(before,)] = self.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}").fetchall()
        self.conn.cursor().executemany(sql, rows)
        found = self.execute(f"SELECT id FROM {table} WHERE id > {self.placeholder} ORDER BY id", (before,))
        return [pk for (pk,) in found.fetchall()]

    def begin(self) -> None:
        self.execute(self.begin_sql)

    def commit(self) -> None:
        self.execute("COMMIT")

    def claim(self) -> int | None:
        """Lock the oldest due job for this worker; its id, or None when nothing is due."""
        raise NotImplementedError

    def finish(self, job_id: int) -> None:
        self.execute(f"UPDATE {TABLE} SET status = 'done' WHERE id = {self.placeholder}", (job_id,))

    def requeue(self, job_id: int) -> None:
        """Put a claimed job back, so that the next claim finds it again (claim cost)."""
        self.execute(f"UPDATE {TABLE} SET status = 'queued' WHERE id = {self.placeholder}", (job_id,))

    def process_all(self, steps: int = 0) -> int:
        """Claim and finish jobs until none is due, each with ``steps`` checkpoints; returns how
        many ran."""
        p = self.placeholder
        checkpoint = f"INSERT INTO {STEPS_TABLE} (job_id, position, result) VALUES ({p}, {p}, {p})"
        ran = 0
        while (job_id := self.claim()) is not None:
            for position in range(steps):
                self.execute(checkpoint, (job_id, position, self.payload(position)))
            self.finish(job_id)
            ran += 1
        return ran

    def add_jobs(self, count: int, status: str) -> None:
        """Add ``count`` jobs in ``status``, due now, in one statement (the claim must not get
        slower for done jobs, nor for queued ones behind the one it takes)."""
        values = ["'{}'", f"'{status}'", self.now_sql]
        self.execute(rows_sql(self.vendor, TABLE, ["payload", "status", "run_at"], values, count))

    def time_claim(self) -> float:
        """Seconds one claim of the single queued job takes; the job is put back afterwards."""
        start = time.perf_counter()
        job_id = self.claim()
        took = time.perf_counter() - start
        if job_id is None:
            raise RuntimeError("the raw queue found no job to claim")
        self.requeue(job_id)
        return took

    def close(self) -> None:
        self.conn.close()


class PostgresRawQueue(RawQueue):
    vendor = "postgresql"
    now_sql = "now()"
    create_sql = (
        f"CREATE TABLE {TABLE} (id bigserial PRIMARY KEY, payload jsonb NOT NULL,"
        " status varchar(20) NOT NULL, run_at timestamptz NOT NULL)",
        f"CREATE INDEX {TABLE}_due ON {TABLE} (status, run_at)",
        f"CREATE TABLE {STEPS_TABLE} (id bigserial PRIMARY KEY, job_id bigint NOT NULL,"
        " position integer NOT NULL, result jsonb NOT NULL)",
    )
    clear_sql = f"TRUNCATE {TABLE} RESTART IDENTITY"
    claim_sql = (
        f"UPDATE {TABLE} SET status = 'running' WHERE id = ("
        f"SELECT id FROM {TABLE} WHERE status = 'queued' AND run_at <= now()"
        " ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
    )

    def connect(self, target: Target):
        import psycopg

        return psycopg.connect(**postgres_params(target), autocommit=True)

    def payload(self, n: int):
        from psycopg.types.json import Jsonb

        return Jsonb({"n": n})  # what Django hands psycopg for a JSONField

    def insert_returning_ids(self, sql: str, rows: list, table: str) -> list[int]:
        """``executemany`` with ``RETURNING``, as psycopg does it: a result per row."""
        cursor = self.conn.cursor()
        cursor.executemany(f"{sql} RETURNING id", rows, returning=True)
        ids = []
        while True:
            ids.append(cursor.fetchone()[0])
            if not cursor.nextset():
                return ids

    def begin(self) -> None:
        self.conn.autocommit = False  # psycopg opens the transaction with the next statement

    def commit(self) -> None:
        self.conn.commit()
        self.conn.autocommit = True

    def claim(self) -> int | None:
        row = self.execute(self.claim_sql).fetchone()
        return row[0] if row else None


class SqliteRawQueue(RawQueue):
    vendor = "sqlite"
    placeholder = "?"
    now_sql = "STRFTIME('%Y-%m-%d %H:%M:%f', 'NOW')"
    begin_sql = "BEGIN IMMEDIATE"  # take the write lock at once, as Django's settings here do
    create_sql = (
        f"CREATE TABLE {TABLE} (id integer PRIMARY KEY AUTOINCREMENT, payload text NOT NULL,"
        " status varchar(20) NOT NULL, run_at text NOT NULL)",
        f"CREATE INDEX {TABLE}_due ON {TABLE} (status, run_at)",
        f"CREATE TABLE {STEPS_TABLE} (id integer PRIMARY KEY, job_id integer NOT NULL,"
        " position integer NOT NULL, result text NOT NULL)",
    )
    claim_sql = (
        f"UPDATE {TABLE} SET status = 'running' WHERE id = ("
        f"SELECT id FROM {TABLE} WHERE status = 'queued' AND run_at <= {now_sql}"
        " ORDER BY run_at, id LIMIT 1) RETURNING id"
    )

    def connect(self, target: Target):
        conn = sqlite3.connect(target.name, isolation_level=None, timeout=30)  # autocommit
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # as the Django settings have it
        return conn

    def clear(self) -> None:
        super().clear()
        self.execute("DELETE FROM sqlite_sequence WHERE name = ?", (TABLE,))

    def claim(self) -> int | None:
        row = self.execute(self.claim_sql).fetchone()
        return row[0] if row else None


class MysqlRawQueue(RawQueue):
    vendor = "mysql"
    now_sql = "NOW(6)"
    begin_sql = "START TRANSACTION"
    create_sql = (
        f"CREATE TABLE {TABLE} (id bigint AUTO_INCREMENT PRIMARY KEY, payload json NOT NULL,"
        " status varchar(20) NOT NULL, run_at datetime(6) NOT NULL,"
        f" INDEX {TABLE}_due (status, run_at)) ENGINE=InnoDB",
        f"CREATE TABLE {STEPS_TABLE} (id bigint AUTO_INCREMENT PRIMARY KEY, job_id bigint NOT NULL,"
        " position integer NOT NULL, result json NOT NULL) ENGINE=InnoDB",
    )
    clear_sql = f"TRUNCATE TABLE {TABLE}"
    select_sql = (
        f"SELECT id FROM {TABLE} WHERE status = 'queued' AND run_at <= NOW(6)"
        " ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
    )

    def connect(self, target: Target):
        conn = mysql_connect(target)
        conn.autocommit(True)
        # Django's settings use READ COMMITTED too: fewer gap locks between workers.
        conn.cursor().execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        return conn

    def claim(self) -> int | None:
        self.begin()
        row = self.execute(self.select_sql).fetchone()
        if row:
            self.execute(f"UPDATE {TABLE} SET status = 'running' WHERE id = %s", (row[0],))
        self.commit()
        return row[0] if row else None


def open_raw_queue(target: Target) -> RawQueue:
    """The raw queue for ``target``'s database, on a connection of its own."""
    queue_class = {"postgresql": PostgresRawQueue, "sqlite": SqliteRawQueue, "mysql": MysqlRawQueue}
    return queue_class[target.vendor](target)
