"""Whether a connection keeps the statements it prepares: not through a pooler in transaction
mode (PgBouncer before 1.21, or without ``max_prepared_statements``), where each transaction
may run on another server connection, one that lacks the statement or has another by its name.
"""

from __future__ import annotations

import secrets
from typing import Any

from ..redaction import package_logger

logger = package_logger("django_durajobs.store")

#: False once a connection showed that it cannot keep prepared statements: from then on this
#: process prepares nothing (its connections all go the same way).
preparing_allowed = True


def may_prepare_on(raw: Any) -> bool | None:
    """Whether the hot path may prepare its statements on the psycopg connection ``raw``: True,
    False (and preparing is off for the process), or None when it cannot be told now.

    A direct connection says so at once: the server's process id is the one the connection was
    given at login (a pooler makes up its own). Through a pooler, a statement is prepared in a
    transaction of its own, and looked up on the server: kept under the name psycopg gave it, the
    pooler passes names through and another client's statement may answer to it; renamed, the
    pooler keeps each client's statements apart (PgBouncer 1.21+ with ``max_prepared_statements``).
    Inside a transaction nothing is tried (a failed attempt would end the caller's transaction).
    """
    if raw.info.transaction_status != 0:  # psycopg's IDLE: not inside a transaction
        return None
    with raw.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()", prepare=False)
        if cursor.fetchone()[0] == raw.info.backend_pid:
            return True
    if _pooler_keeps_them_apart(raw):
        return True
    switch_off_preparing()
    return False


def _pooler_keeps_them_apart(raw: Any) -> bool:
    probe = f"SELECT 1 /* durajobs prepare probe {secrets.token_hex(8)} */"
    try:
        with raw.transaction(), raw.cursor() as cursor:
            cursor.execute(probe, prepare=True)
            cursor.execute(
                "SELECT name FROM pg_prepared_statements WHERE statement = %s", [probe], prepare=False
            )
            names = [row[0] for row in cursor.fetchall()]
            for name in names:
                cursor.execute(f'DEALLOCATE "{name}"', prepare=False)  # leave the server as it was
    except raw.DatabaseError:  # the name psycopg chose is another client's on that server
        return False
    return bool(names) and not any(name.startswith("_pg3_") for name in names)


def switch_off_preparing() -> None:
    global preparing_allowed
    if preparing_allowed:
        preparing_allowed = False
        logger.warning(
            "The database connection cannot keep prepared statements (a connection pooler in "
            "transaction mode): this process prepares none from now on. Set "
            "DURAJOBS['PREPARED_STATEMENTS'] = False to skip this check, or keep them with "
            "PgBouncer 1.21+ and max_prepared_statements."
        )
