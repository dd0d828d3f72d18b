"""Django settings of the benchmark, for ``bench/run.py`` and the worker processes it starts.

The database is the one ``bench/run.py`` created, handed over in ``BENCH_DATABASE_URL``.
Only what django-durajobs needs is installed, and the admin, whose job list one workload renders
(``bench/scale_admin.py``); django-durajobs' own settings keep their documented defaults.
"""

import os

from bench.database import UNPREPARED_VARIABLE, URL_VARIABLE, Target, django_settings

SECRET_KEY = "django-durajobs-bench-not-a-secret"
DEBUG = False  # DEBUG would keep every query in memory
ALLOWED_HOSTS = ["testserver"]  # the admin workload's test client
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",  # Job.created_by points at the user model
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django_durajobs",
    "bench.benchapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "bench.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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

DATABASES = {"default": django_settings(Target.parse(os.environ[URL_VARIABLE]))}
# The fleet workload (bench/fleet.py) runs some workers without prepared statements, as they run
# through PgBouncer: what the pooler's hop costs apart from what losing them costs.
if os.environ.get(UNPREPARED_VARIABLE):
    DURAJOBS = {"PREPARED_STATEMENTS": False}
