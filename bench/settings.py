"""Django settings of the benchmark, for ``bench/run.py`` and the worker processes it starts.

The database is the one ``bench/run.py`` created, handed over in ``BENCH_DATABASE_URL``.
Only what django-durajobs needs is installed; its own settings keep their documented defaults.
"""

import os

from bench.database import URL_VARIABLE, Target, django_settings

SECRET_KEY = "django-durajobs-bench-not-a-secret"
DEBUG = False  # DEBUG would keep every query in memory
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.auth",  # Job.created_by points at the user model
    "django.contrib.contenttypes",
    "django_durajobs",
    "bench.benchapp",
]

DATABASES = {"default": django_settings(Target.parse(os.environ[URL_VARIABLE]))}
