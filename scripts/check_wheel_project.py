"""A first project on the installed wheel with its [postgres] extra (scripts/check-quickstart's third part).

Makes a project in the current directory whose app's jobs.py is the README's Installation example,
on a fresh PostgreSQL database, runs its first job with ``runjobs --burst`` and checks what a user
would: the job done, the admin's job list in English and in Korean, and the wheel's contents.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

HERE = Path.cwd()
DATABASE = "durajobs_wheel"
README = Path(os.environ["CHECK_WHEEL_README"]).read_text(encoding="utf-8")
SERVER_URL = os.environ["CHECK_WHEEL_DATABASE_URL"]

SETTINGS = """
SECRET_KEY = "check-wheel"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_durajobs",
    "myapp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {"ENGINE": "django.db.backends.postgresql", "NAME": %(name)r, "USER": %(user)r,
                "HOST": %(host)r, "PORT": %(port)r}
}
LANGUAGES = [("en", "English"), ("ko", "Korean")]
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
"""

URLS = """
from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
"""


def readme_block(first_line: str, section: str) -> str:
    text = README[README.index(section) :]
    for code in re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL):
        if code.startswith(first_line):
            return code
    sys.exit(f"check-quickstart (3/3): README.md's {section!r} has no Python block starting {first_line!r}")


FAILED: list[str] = []


def check(condition: bool, what: str) -> None:
    print(f"  {'ok  ' if condition else 'FAIL'} {what}")
    if not condition:
        FAILED.append(what)


def check_wheel_contents() -> None:
    names = set(zipfile.ZipFile(os.environ["CHECK_WHEEL_WHEEL"]).namelist())
    source = Path(os.environ["CHECK_WHEEL_SOURCE"])
    compiled = {
        f"django_durajobs/{mo.relative_to(source)}" for mo in source.glob("locale/*/LC_MESSAGES/*.mo")
    }
    print("the wheel:")
    check(bool(compiled) and compiled <= names, f"compiled translations: {', '.join(sorted(compiled))}")
    check("django_durajobs/static/django_durajobs/console.js" in names, "static files")
    check(
        any(n.startswith("django_durajobs/templates/admin/django_durajobs/job/") for n in names), "templates"
    )
    check("django_durajobs/migrations/0001_initial.py" in names, "migrations")
    check("django_durajobs/py.typed" in names, "py.typed")
    check(any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "LICENSE")
    strays = sorted(n for n in names if n.split("/")[0] in ("tests", "example_project", "bench", "scripts"))
    check(not strays, f"nothing but the package ({strays[:3] or 'no tests, demo, bench or scripts'})")


def manage(*arguments: str) -> str:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "settings", "PYTHONPATH": str(HERE)}
    done = subprocess.run(
        [sys.executable, "manage.py", *arguments], cwd=HERE, env=env, capture_output=True, text=True
    )
    if done.returncode:
        sys.exit(
            f"check-quickstart (3/3): manage.py {' '.join(arguments)} failed:\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def server(dbname: str) -> psycopg.Connection:
    parts = urlsplit(SERVER_URL)
    return psycopg.connect(urlunsplit(parts._replace(path=f"/{dbname}")), autocommit=True)


def make_project() -> None:
    parts = urlsplit(SERVER_URL)
    values = {
        "name": DATABASE,
        "user": parts.username or "postgres",
        "host": parts.hostname,
        "port": parts.port,
    }
    (HERE / "settings.py").write_text(SETTINGS % values)
    (HERE / "urls.py").write_text(URLS)
    (HERE / "manage.py").write_text(
        "import sys\nfrom django.core.management import execute_from_command_line\n"
        "execute_from_command_line(sys.argv)\n"
    )
    (HERE / "myapp").mkdir()
    (HERE / "myapp" / "__init__.py").write_text("")
    (HERE / "myapp" / "jobs.py").write_text(readme_block("# myapp/jobs.py", "## Installation"))


def run_first_job() -> None:
    import django_durajobs

    print("the installed package:")
    check(Path(django_durajobs.__file__).is_relative_to(Path(sys.prefix)), f"imported from {sys.prefix}")
    manage("migrate", "--noinput", "-v", "0")
    enqueue = readme_block("from myapp.jobs import say_hello", "## Installation")
    manage("shell", "-c", enqueue)
    print("the first job:")
    worker = manage("runjobs", "--burst")
    print(
        "  " + worker.strip().replace("\n", "\n  ") if worker.strip() else "  (runjobs --burst said nothing)"
    )


def check_from_django() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "settings"
    sys.path.insert(0, str(HERE))
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.test import Client
    from django.utils import translation

    from django_durajobs import Job, describe

    job = Job.objects.get(kind="say_hello")
    summary = describe(job)
    check(summary["status"] == "done", f"job {job.pk} is {summary['status']}")
    check(job.result == {"greeting": "Hello, Ada!"}, f"its result: {job.result}")
    check([s["state"] for s in summary["steps"]] == ["done"], "its step is done")

    print("the admin:")
    client = Client()
    client.force_login(User.objects.create_superuser("admin", "admin@example.org", "x"))
    for language in ("en", "ko"):
        response = client.get("/admin/django_durajobs/job/", HTTP_ACCEPT_LANGUAGE=language)
        page = response.content.decode()
        with translation.override(language):
            retry = translation.gettext("Retry selected jobs")
            done = translation.gettext("Done")
        check(response.status_code == 200 and retry in page and done in page, f"job list in {language!r}")
        if language == "ko":
            check(retry != "Retry selected jobs", f"Korean: {retry!r}, {done!r}")


def main() -> None:
    check_wheel_contents()
    with server("postgres") as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {DATABASE}")
    try:
        make_project()
        run_first_job()
        check_from_django()
    finally:
        from django.conf import settings

        if settings.configured:
            from django.db import connections

            connections.close_all()
        with server("postgres") as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    if FAILED:
        sys.exit(f"check-quickstart (3/3): {len(FAILED)} check(s) failed")
    print("check-quickstart (3/3): the built wheel installs and runs a first job")


if __name__ == "__main__":
    main()
