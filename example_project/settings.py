"""Settings of the example project: django-durajobs used as an application would use it.

Local demo settings (DEBUG on, a fixed secret key), not a production template. Environment:

- ``DEMO_DIR``: where the SQLite database and the demo's files go (default: the repository).
- ``DATABASE_URL``: another database instead of SQLite (needs dj-database-url).
- ``DEMO_STEP_SECONDS``: how long each simulated piece of outside work takes (default 1.5).
- ``DEMO_DNS_PROPAGATION_SECONDS``: how long the seeded DNS change takes to be visible (default 120).
- ``DEMO_PAYMENT_SECRET``: the shared secret of the simulated payment provider's callback.
- ``DEMO_LANGUAGE``: the site's default language, its ``LANGUAGE_CODE`` (default ``en-us``); each
  visitor gets English or Korean as their browser asks (``Accept-Language``) or as they choose in
  the admin's header.
"""

import importlib.util
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
DEMO_DIR = Path(os.environ.get("DEMO_DIR") or BASE_DIR).resolve()

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-not-a-secret")
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_durajobs",
    "example_project.demo",
]
if importlib.util.find_spec("django_extensions"):
    INSTALLED_APPS.append("django_extensions")  # shell_plus, show_urls, graph_models…

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",  # the language the browser asks for, or the one chosen
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Before the admin's own: the demo's admin header, with a language switch.
        "DIRS": [BASE_DIR / "example_project" / "demo" / "templates"],
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

# The web server and a runjobs worker with several threads write at the same time: SQLite
# needs WAL, a busy timeout and BEGIN IMMEDIATE for that. PostgreSQL is what fleets run on.
if os.environ.get("DATABASE_URL"):
    if not importlib.util.find_spec("dj_database_url"):
        raise ImproperlyConfigured(
            "DATABASE_URL is set: install dj-database-url (pip install -e '.[example]')."
        )
    import dj_database_url

    DATABASES = {"default": dj_database_url.config(conn_max_age=0)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": DEMO_DIR / "example.sqlite3",
            "OPTIONS": {
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
            },
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = os.environ.get("DEMO_LANGUAGE", "en-us")
#: The languages django-durajobs and the demo are translated into.
LANGUAGES = [("en", "English"), ("ko", "한국어")]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"

# django-durajobs: the documented defaults suit the demo (see docs/settings.md), and the shop is
# backed up every night (docs/schedules.md).
DURAJOBS = {
    "SCHEDULES": {
        "nightly-backup": {"kind": "backup_database", "cron": "0 3 * * *", "timezone": "Europe/Berlin"},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        # One line per job start, finish, wait and failure.
        "django_durajobs": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}

# The demo app (example_project/demo).
DEMO_FILES_DIR = DEMO_DIR / "var" / "demo"
DEMO_STEP_SECONDS = float(os.environ.get("DEMO_STEP_SECONDS", "1.5"))
DEMO_DNS_PROPAGATION_SECONDS = float(os.environ.get("DEMO_DNS_PROPAGATION_SECONDS", "120"))
DEMO_PAYMENT_SECRET = os.environ.get("DEMO_PAYMENT_SECRET", "demo-payment-secret")
