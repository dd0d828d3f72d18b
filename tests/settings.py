"""Django settings for the test suite.

The database comes from ``DATABASE_URL`` (SQLite when it is unset), so one suite runs on SQLite,
PostgreSQL and MySQL/MariaDB:

    ./scripts/test
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/test ./scripts/test
    DATABASE_URL=mysql://root@127.0.0.1:3306/test ./scripts/test
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dj_database_url

REPO_ROOT = Path(__file__).resolve().parent.parent

SECRET_KEY = "django-durajobs-tests-not-a-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_durajobs",
    "tests.testapp",
    "example_project.demo",  # the example project's kinds, tested in tests/integration/test_example.py
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "tests.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

STATIC_URL = "static/"

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# ---------------------------------------------------------------------------------------------
# Database
#
# SQLite: the test database is a FILE, never in-memory, because tests start threads and child
# processes that must all see the same database. Its path is $DURAJOBS_TEST_SQLITE, or
# <repo>/.pytest-db/test.sqlite3. WAL, a busy timeout and BEGIN IMMEDIATE let several
# connections write without "database is locked" errors.
#
# DURAJOBS_USE_TEST_DB=1: point NAME straight at the test database that pytest-django creates
# (the SQLite file above; `test_<NAME>` on PostgreSQL and MySQL, or TEST["NAME"] when set).
# The test run itself must NOT set it; the `child_env` fixture (tests/conftest.py) sets it for the
# worker processes a test starts, so that they connect to the database the run created instead
# of the empty main one.
#
# Under pytest-xdist every worker (PYTEST_XDIST_WORKER=gw0, gw1, ...) has a test database of its
# own: pytest-django appends `_gw0` to the test database's name (the SQLite file's too), and the
# child processes a test starts inherit PYTEST_XDIST_WORKER, so the name below carries the same
# suffix and they reach their own worker's database.
# ---------------------------------------------------------------------------------------------

SQLITE_TEST_PATH = Path(os.environ.get("DURAJOBS_TEST_SQLITE") or REPO_ROOT / ".pytest-db" / "test.sqlite3")

_default = dj_database_url.parse(
    os.environ.get("DATABASE_URL") or f"sqlite:///{REPO_ROOT / '.pytest-db' / 'db.sqlite3'}",
    conn_max_age=0,
)
_engine = _default["ENGINE"]

if _engine == "django.db.backends.sqlite3":
    SQLITE_TEST_PATH.parent.mkdir(parents=True, exist_ok=True)
    Path(_default["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    _default["OPTIONS"] = {
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        **_default.get("OPTIONS", {}),
    }
    _default["TEST"] = {"NAME": str(SQLITE_TEST_PATH)}
elif _engine == "django.db.backends.mysql":
    _default["OPTIONS"] = {
        "charset": "utf8mb4",
        # Child processes may run at MariaDB's default instead ($DURAJOBS_TEST_MYSQL_ISOLATION).
        "isolation_level": os.environ.get("DURAJOBS_TEST_MYSQL_ISOLATION", "read committed"),
        **_default.get("OPTIONS", {}),
    }
    _default["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}

DATABASES = {"default": _default}  # CONN_MAX_AGE 0: a new connection per request/thread

# DURAJOBS_TEST_JOBS_DATABASE: the jobs in a database of their own, the alias "jobs"
# (DURAJOBS["DATABASE"]): a URL, or "1" for one beside the default's (SQLite: a file next to
# it; PostgreSQL and MySQL: its NAME with "_jobs" after it). Run any test file this way; the
# django_db marks then reach every database (tests/conftest.py).
JOBS_DATABASE = os.environ.get("DURAJOBS_TEST_JOBS_DATABASE", "")
if JOBS_DATABASE:
    _jobs = {**_default, "OPTIONS": dict(_default.get("OPTIONS", {})), "TEST": dict(_default.get("TEST", {}))}
    if JOBS_DATABASE != "1":
        _jobs.update(dj_database_url.parse(JOBS_DATABASE, conn_max_age=0))
    elif _engine == "django.db.backends.sqlite3":
        _jobs["NAME"] = str(Path(_default["NAME"]).with_name("jobs.sqlite3"))
    else:
        _jobs["NAME"] = f"{_default['NAME']}_jobs"
    if _engine == "django.db.backends.sqlite3":
        _jobs["TEST"] = {"NAME": str(SQLITE_TEST_PATH.with_name("test-jobs.sqlite3"))}
    DATABASES["jobs"] = _jobs
    DATABASE_ROUTERS = ["django_durajobs.routers.JobsRouter"]

# DURAJOBS_TEST_LISTEN_DATABASE: a direct URL to the PostgreSQL server that DATABASE_URL reaches
# through a pooler (scripts/pgbouncer); the workers LISTEN there (DURAJOBS["LISTEN_DATABASE"]).
# The same database as default's: a mirror of it, which the test run does not create again.
LISTEN_DATABASE = os.environ.get("DURAJOBS_TEST_LISTEN_DATABASE", "")
if LISTEN_DATABASE:
    DATABASES["listen"] = {
        **dj_database_url.parse(LISTEN_DATABASE, conn_max_age=0),
        "NAME": _default["NAME"],
        "TEST": {"MIRROR": "default"},
    }

if os.environ.get("DURAJOBS_USE_TEST_DB") == "1":
    # The name pytest-django gives the test database: Django's creation.get_test_db_name()
    # (TEST["NAME"], else "test_" + NAME), with the xdist worker's suffix under pytest-xdist.
    for _db in DATABASES.values():
        _test_name = _db.get("TEST", {}).get("NAME") or f"test_{_db['NAME']}"
        _xdist_worker = os.environ.get("PYTEST_XDIST_WORKER")
        _db["NAME"] = f"{_test_name}_{_xdist_worker}" if _xdist_worker else _test_name

# django-durajobs: the documented defaults, except that a test may shorten the timing settings for
# the worker processes it starts through their environment (DURAJOBS_LEASE_SECONDS=2, ...), so a
# killed worker is recovered in seconds.
DURAJOBS: dict = {
    key: float(os.environ[f"DURAJOBS_{key}"])
    for key in (
        "LEASE_SECONDS",
        "HEARTBEAT_SECONDS",
        "BACKOFF_BASE_SECONDS",
        "MAX_WORKER_LOSSES",
        "SCHEDULE_GRACE_SECONDS",
        "STREAM_POLL_SECONDS",
        "VERSION_WAIT_SECONDS",
    )
    if f"DURAJOBS_{key}" in os.environ
}
if os.environ.get("DURAJOBS_STREAM_NOTIFY") == "1":  # uvicorn and workers that announce job changes
    DURAJOBS["STREAM_NOTIFY"] = True
if LISTEN_DATABASE:
    DURAJOBS["LISTEN_DATABASE"] = "listen"
if JOBS_DATABASE:
    DURAJOBS["DATABASE"] = "jobs"
    SILENCED_SYSTEM_CHECKS = ["durajobs.W030"]  # what a database of their own costs: known here
if "DURAJOBS_QUEUE_LIMITS" in os.environ:  # JSON: {"queue": limit}
    DURAJOBS["QUEUE_LIMITS"] = json.loads(os.environ["DURAJOBS_QUEUE_LIMITS"])

# The example project's demo app (tests/integration/test_example.py points DEMO_FILES_DIR at a temporary
# directory per test). No pacing: its steps run at full speed.
DEMO_FILES_DIR = REPO_ROOT / ".pytest-db" / "demo"
DEMO_STEP_SECONDS = 0
DEMO_DNS_PROPAGATION_SECONDS = 20
DEMO_PAYMENT_SECRET = "test-payment-secret"

# Django's Tasks on django-durajobs (tests/integration/test_tasks_*.py); "special" for queue tests.
TASKS = {
    "default": {
        "BACKEND": "django_durajobs.tasks.DurableBackend",
        "QUEUES": ["default", "special"],
    }
}
