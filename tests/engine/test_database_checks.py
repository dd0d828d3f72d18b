"""System checks of where the jobs live: a bad set-up is named by its id before a worker starts."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connections
from django.test import override_settings

from django_durajobs.database_checks import check_databases

ROUTER = "django_durajobs.routers.JobsRouter"

pytestmark = pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")


@pytest.fixture
def elsewhere():
    """A second database, "elsewhere" (SQLite; never connected to: the checks read settings)."""
    databases = {
        **settings.DATABASES,
        "elsewhere": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
    }
    kept = connections.settings  # the handler reads DATABASES once
    with override_settings(DATABASES=databases):
        connections.settings = connections.configure_settings(databases)
        yield "elsewhere"
    connections.settings = kept
    if hasattr(connections._connections, "elsewhere"):
        del connections["elsewhere"]


def ids(durajobs: dict, **other_settings) -> list[str]:
    with override_settings(DURAJOBS=durajobs, **other_settings):
        return [message.id for message in check_databases()]


def test_the_default_database_needs_nothing_more():
    assert ids({}) == []
    assert ids({"DATABASE": "default"}) == []


@pytest.mark.parametrize(
    ("durajobs", "expected"),
    [
        pytest.param({"DATABASE": "jobs_nowhere"}, ["durajobs.E030"], id="jobs alias missing"),
        pytest.param({"DATABASE": None}, ["durajobs.E030"], id="jobs alias not a string"),
        pytest.param({"LISTEN_DATABASE": "direct_nowhere"}, ["durajobs.E031"], id="listen alias missing"),
    ],
)
def test_an_alias_that_is_not_in_databases(durajobs, expected):
    assert ids(durajobs) == expected


def test_listening_on_a_database_that_is_not_postgresql(elsewhere):
    assert ids({"LISTEN_DATABASE": elsewhere}) == ["durajobs.E032"]


def test_a_jobs_database_without_its_router(elsewhere):
    assert ids({"DATABASE": elsewhere}, DATABASE_ROUTERS=[]) == ["durajobs.E033", "durajobs.W030"]


def test_a_router_before_the_jobs_one_that_claims_every_model(elsewhere):
    """A half-done set-up: the jobs' router is there, but another before it sends every model,
    the jobs too, to default."""
    routers = ["tests.engine.test_database_checks.EverythingHere", ROUTER]
    assert ids({"DATABASE": elsewhere}, DATABASE_ROUTERS=routers) == ["durajobs.E033", "durajobs.W030"]


def test_a_jobs_database_with_its_router_says_what_it_costs(elsewhere):
    assert ids({"DATABASE": elsewhere}, DATABASE_ROUTERS=[ROUTER]) == ["durajobs.W030"]


class EverythingHere:
    """A project's router that puts every model in ``default``, placed before the jobs' own."""

    def db_for_read(self, model, **hints):
        return "default"

    db_for_write = db_for_read

    def allow_migrate(self, db, app_label, **hints):
        return db == "default"
