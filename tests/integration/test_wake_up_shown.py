"""Which workers listen for new jobs and which poll: said by each worker's row, shown in the
console's workers table and in ``manage.py jobs stats``."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_durajobs import store
from tests.admin_pages import logged_in, staff_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_workers():
    store.register_worker("listening@h:1:a", ["default"], 2)
    store.register_worker("polling@h:2:b", ["default"], 2)
    store.worker_listens("listening@h:1:a", True)
    store.worker_listens("polling@h:2:b", False)


def test_the_console_s_workers_table_says_which_listen(two_workers, django_user_model):
    client = logged_in(staff_user(django_user_model, "vera-viewer", "view_job"))
    page = client.get(reverse("admin:django_durajobs_job_dashboard")).content.decode()
    shown = dict(
        re.findall(r'data-worker-id="([^"]+)".*?<td class="durajobs-wake-up">(\w+)</td>', page, re.DOTALL)
    )
    assert shown == {"listening@h:1:a": "listens", "polling@h:2:b": "polls"}


def test_jobs_stats_says_which_listen(two_workers):
    out = StringIO()
    call_command("jobs", "stats", "--json", stdout=out)
    workers = {worker["worker_id"]: worker["listens"] for worker in json.loads(out.getvalue())["workers"]}
    assert workers == {"listening@h:1:a": True, "polling@h:2:b": False}
    text = StringIO()
    call_command("jobs", "stats", "--plain", stdout=text)
    lines = {line.split()[0]: line for line in text.getvalue().splitlines() if "@h:" in line}
    assert "listens" in lines["listening@h:1:a"] and "polls" in lines["polling@h:2:b"]
