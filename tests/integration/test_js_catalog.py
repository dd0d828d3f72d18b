"""This app's JavaScript catalog: the console's texts (relative times, "Updated ...") come from
the ``djangojs`` domain of ``django_durajobs``, which admin's own catalog does not hold."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.admin_pages import change_url, list_url, logged_in, staff_user
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db

CATALOG = "admin:django_durajobs_job_jsi18n"


@pytest.fixture
def viewer_client(django_user_model):
    return logged_in(staff_user(django_user_model, "vera-viewer", "view_job"))


def test_the_catalog_answers_staff(viewer_client):
    response = viewer_client.get(reverse(CATALOG))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/javascript")
    assert "django.catalog" in response.content.decode()


def test_the_catalog_sends_an_anonymous_visitor_to_the_login():
    response = Client().get(reverse(CATALOG))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


@pytest.mark.parametrize("page", ["list", "job", "dashboard"])
def test_every_page_with_the_console_loads_the_catalog_before_it(admin_client, page):
    urls = {
        "list": list_url,
        "job": lambda: change_url(JobFactory()),
        "dashboard": lambda: reverse("admin:django_durajobs_job_dashboard"),
    }
    content = admin_client.get(urls[page]()).content.decode()
    admin_catalog = content.index(f'<script src="{reverse("admin:jsi18n")}"')
    own_catalog = content.index(f'<script src="{reverse(CATALOG)}"')
    assert admin_catalog < own_catalog < content.index("django_durajobs/console.js")


def test_the_list_loads_the_catalog_without_actions_too(viewer_client):
    """Admin's catalog comes only with the list's actions; this app's catalog always does."""
    content = viewer_client.get(list_url()).content.decode()
    assert content.index(f'<script src="{reverse(CATALOG)}"') < content.index("django_durajobs/console.js")
