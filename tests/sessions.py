"""Server sessions a test ends the way a DBA or a failover proxy does (PostgreSQL and MySQL/MariaDB),
to show what a worker does when its database goes away under it."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection

from tests.helpers import wait_for


def session_id(cursor) -> int:
    """The database's id of the session ``cursor`` belongs to."""
    postgresql = connection.vendor == "postgresql"
    cursor.execute("SELECT pg_backend_pid()" if postgresql else "SELECT CONNECTION_ID()")
    return cursor.fetchone()[0]


def other_sessions(cursor) -> list[int]:
    """Every other client session on the test database (the workers', in these tests)."""
    if connection.vendor == "postgresql":
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
    else:
        cursor.execute(
            "SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()"
        )
    return [row[0] for row in cursor.fetchall()]


def end_sessions(cursor, sessions) -> None:
    """End ``sessions`` the way a DBA (or a failover proxy) does, and wait until they are gone."""
    for session in sessions:
        try:
            if connection.vendor == "postgresql":
                cursor.execute("SELECT pg_terminate_backend(%s, 10000)", [session])
            else:
                cursor.execute(f"KILL CONNECTION {int(session)}")
        except DatabaseError:
            pass  # it ended by itself meanwhile

    def gone():
        if connection.vendor == "postgresql":
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", [list(sessions)])
        else:
            ids = ", ".join(str(int(session)) for session in sessions)
            cursor.execute(
                f"SELECT count(*) FROM information_schema.processlist WHERE id IN ({ids}) "
                "AND command <> 'Killed'"
            )
        return cursor.fetchone()[0] == 0

    wait_for(gone, timeout=15, message="the ended sessions to disappear")


def drop_worker_sessions() -> int:
    """From the test's own session, end every other session on the test database; returns how many."""
    with connection.cursor() as cursor:
        sessions = other_sessions(cursor)
        end_sessions(cursor, sessions)
    return len(sessions)


def end_own_session() -> None:
    """End the test's own session from a second connection, as the server would."""
    with connection.cursor() as cursor:
        mine = session_id(cursor)
    outside = connection.get_new_connection(connection.get_connection_params())
    try:
        with outside.cursor() as cursor:
            end_sessions(cursor, [mine])
    finally:
        outside.close()


def needs_sessions(db_vendor):
    if db_vendor == "sqlite":
        pytest.skip("SQLite has no server sessions that could be dropped")
