"""The example project with its own settings (``example_project.settings``, in a child process):
it serves English or Korean as the browser asks (``Accept-Language``) or as the admin's language
switch chooses, links an icon so no page asks for a missing ``/favicon.ico``, and the demo's hints
follow the site's language, naming the buttons as the admin shows them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT
from tests.integration.test_korean import ko

#: Run in the child: a staff user, then what the pages say; printed as JSON.
VISIT = """
import json
import django
django.setup()
from django.contrib.auth import get_user_model
from django.contrib.staticfiles import finders
from django.test import Client
from django.test.utils import setup_test_environment

setup_test_environment()
user = get_user_model().objects.create_superuser("ops", "ops@example.org", "x")
korean = Client(HTTP_ACCEPT_LANGUAGE="ko")
login = korean.get("/admin/login/")
korean.force_login(user)
index = korean.get("/admin/").content.decode()
switched = korean.post("/i18n/setlang/", {"language": "en", "next": "/admin/"})
english = korean.get("/admin/").content.decode()
icon = Client().get("/favicon.ico")
print(json.dumps({
    "login_language": login.headers.get("Content-Language"),
    "index_korean": 'lang="ko"' in index,
    "switch": 'id="demo-language"' in index and 'action="/i18n/setlang/"' in index,
    "icon_linked": 'rel="icon"' in index,
    "switched": switched.status_code,
    "english_after_switch": 'lang="en"' in english,
    "icon_status": icon.status_code,
    "icon_found": bool(finders.find(icon.headers["Location"].removeprefix("/static/"))),
}))
"""


def example(tmp_path, *arguments: str, language: str = "en-us") -> str:
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "DEMO_DIR": str(tmp_path),
        "DEMO_LANGUAGE": language,
    }
    environment.pop("DATABASE_URL", None)
    finished = subprocess.run(
        [sys.executable, *arguments],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 0, finished.stderr
    return finished.stdout


@pytest.fixture
def migrated(tmp_path):
    example(tmp_path, "manage.py", "migrate", "--noinput", "-v", "0")
    return tmp_path


def test_the_example_serves_the_browsers_language_offers_a_switch_and_an_icon(migrated):
    seen = json.loads(example(migrated, "-c", VISIT))
    assert seen == {
        "login_language": "ko",
        "index_korean": True,
        "switch": True,
        "icon_linked": True,
        "switched": 302,
        "english_after_switch": True,
        "icon_status": 302,
        "icon_found": True,
    }


def test_the_demos_hints_are_in_english_on_an_english_site(migrated):
    hints = example(migrated, "manage.py", "demo_hints", "--login", "admin")
    assert "What to click first, in Durable jobs › Jobs:" in hints
    assert "“Retry failed child jobs”" in hints


def test_the_demos_hints_are_in_korean_on_a_korean_site_and_name_the_korean_buttons(migrated):
    hints = example(migrated, "manage.py", "demo_hints", "--login", "admin", language="ko")
    assert "What to click first" not in hints
    assert f"“{ko('Retry failed child jobs')}”" in hints
    assert f"“{ko('Revert', 'job operation')}”" in hints
