"""System checks of the DURAJOBS setting: each misconfiguration is named by its id."""

from __future__ import annotations

import pytest
from django.core import checks
from django.test import override_settings

from django_durajobs.checks import check_settings


def ids(configured) -> list[str]:
    with override_settings(DURAJOBS=configured):
        return [message.id for message in check_settings()]


def test_the_documented_defaults_pass():
    assert ids({}) == []
    registered = checks.run_checks(tags=[checks.Tags.compatibility])  # where check_settings is registered
    assert [message.id for message in registered if message.id.startswith("durajobs.")] == []


@pytest.mark.parametrize(
    ("configured", "expected"),
    [
        pytest.param([], ["durajobs.E001"], id="not a dict"),
        pytest.param({"LEASE_SECOND": 60}, ["durajobs.E002"], id="unknown key"),
        pytest.param({"LEASE_SECONDS": 0}, ["durajobs.E003"], id="zero lease"),
        pytest.param({"LOG_LINES_KEPT": "200"}, ["durajobs.E003"], id="a number as text"),
        pytest.param({"MAX_WORKER_LOSSES": True}, ["durajobs.E003"], id="a bool for a number"),
        pytest.param({"MAX_ACTIONS": 0}, ["durajobs.E003"], id="no actions allowed"),
        pytest.param({"MAX_RESULT_BYTES": -1}, ["durajobs.E003"], id="a negative size"),
        pytest.param({"REDACT_KEYS": "password"}, ["durajobs.E004"], id="keys as one string"),
        pytest.param({"REDACT_KEYS": ["pin", ""]}, ["durajobs.E004"], id="an empty key"),
        pytest.param({"PREPARED_STATEMENTS": "no"}, ["durajobs.E005"], id="prepared statements as text"),
        pytest.param({"QUEUE_LIMITS": [("default", 5)]}, ["durajobs.E010"], id="queue limits not a dict"),
        pytest.param({"QUEUE_LIMITS": {"default": 0}}, ["durajobs.E010"], id="a queue limit of 0"),
        pytest.param({"QUEUE_LIMITS": {"default": "5"}}, ["durajobs.E010"], id="a queue limit as text"),
        pytest.param({"QUEUE_LIMITS": {"": 5}}, ["durajobs.E010"], id="a blank queue name"),
        pytest.param({"HEARTBEAT_SECONDS": 40}, ["durajobs.W001"], id="heartbeat too close to the lease"),
        pytest.param({"ASYNC_DATABASE_THREADS": 0}, ["durajobs.E015"], id="no async database threads"),
        pytest.param({"METRICS_TOKEN": ""}, ["durajobs.E025"], id="an empty metrics token"),
        pytest.param({"METRICS_TOKEN": 1234}, ["durajobs.E025"], id="a metrics token not text"),
        pytest.param({"METRICS_TOKEN": "s3cret"}, [], id="a metrics token"),
        pytest.param({"UNKNOWN_TASK_GRACE_SECONDS": -1}, ["durajobs.E026"], id="a negative task grace"),
        pytest.param({"UNKNOWN_TASK_GRACE_SECONDS": "60"}, ["durajobs.E026"], id="a task grace as text"),
        pytest.param(
            {"UNKNOWN_TASK_GRACE_SECONDS": float("inf")}, ["durajobs.E026"], id="an endless task grace"
        ),
        pytest.param({"UNKNOWN_TASK_GRACE_SECONDS": 300}, [], id="a task grace"),
        pytest.param({"ACCESS_POLICY": "tests.testapp.access.TeamPolicy"}, [], id="an access policy"),
        pytest.param(
            {"ACCESS_POLICY": "tests.testapp.access.Nobody"}, ["durajobs.E028"], id="a missing policy"
        ),
        pytest.param(
            {"ACCESS_POLICY": "django_durajobs.conf.DEFAULTS"}, ["durajobs.E028"], id="a policy not a class"
        ),
        pytest.param({"ACCESS_POLICY": 7}, ["durajobs.E028"], id="a policy not a path"),
        pytest.param({"STREAMS_PER_USER": 0}, ["durajobs.E003"], id="no streams per user"),
        pytest.param({"STREAM_NOTIFY": "yes"}, ["durajobs.E028"], id="stream notifications not a bool"),
        pytest.param({"STREAM_POLL_SECONDS": -1}, ["durajobs.E003"], id="a negative poll interval"),
        pytest.param(
            {"ASYNC_DATABASE_THREADS": 2.5}, ["durajobs.E015"], id="async database threads not whole"
        ),
    ],
)
def test_a_misconfiguration_is_reported_by_its_id(configured, expected):
    assert ids(configured) == expected


def test_manage_py_check_runs_these_checks():
    with override_settings(DURAJOBS={"LEASE_SECONDS": 0}):
        registered = checks.run_checks(tags=[checks.Tags.compatibility])
    assert "durajobs.E003" in [message.id for message in registered]


def test_prepared_statements_may_be_turned_off():
    assert ids({"PREPARED_STATEMENTS": False}) == []


def test_a_changed_setting_is_seen_at_once_and_the_old_value_after(settings):
    from django_durajobs.conf import get_setting

    before = get_setting("LOG_LINES_KEPT")
    with override_settings(DURAJOBS={"LOG_LINES_KEPT": before + 7}):
        assert get_setting("LOG_LINES_KEPT") == before + 7
    assert get_setting("LOG_LINES_KEPT") == before
    settings.DURAJOBS = {"LOG_LINES_KEPT": 3}  # pytest-django's fixture: override_settings too
    assert get_setting("LOG_LINES_KEPT") == 3
    settings.DURAJOBS["LOG_LINES_KEPT"] = 4  # changed in place
    assert get_setting("LOG_LINES_KEPT") == 4
