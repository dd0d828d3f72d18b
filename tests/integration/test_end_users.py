"""The end users' endpoints (``django_durajobs.urls``, at /jobs/ in tests/urls.py): who sees and
acts on which job, answers that resume a job, and input the endpoints refuse."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from django_durajobs import Job, Status, drain, enqueue
from django_durajobs.models import JobLog

pytestmark = pytest.mark.django_db

ROLES = ("owner", "other", "staff", "operator", "anonymous")
#: Which roles see (and may act on) the owner's job by default.
SEES = {"owner": True, "other": False, "staff": False, "operator": True, "anonymous": False}


@pytest.fixture
def users() -> dict[str, User | None]:
    operator = User.objects.create_user("operator", is_staff=True)
    operator.user_permissions.add(
        *Permission.objects.filter(
            codename__in=["view_job", "operate_job"], content_type__app_label="django_durajobs"
        )
    )
    return {
        "owner": User.objects.create_user("owner"),
        "other": User.objects.create_user("other"),
        "staff": User.objects.create_user("staff", is_staff=True),
        "operator": operator,
        "anonymous": None,
    }


def client_of(user: User | None, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    if user is not None:
        client.force_login(user)
    return client


def asking_job(owner: User) -> Job:
    """The owner's deploy, asking whether to overwrite the site already there."""
    job, _created = enqueue(
        "browser_deploy_site", subject={"domain": "shop.example", "occupied": True}, created_by=owner
    )
    drain()
    job.refresh_from_db()
    assert job.status == Status.NEEDS_USER
    return job


def post(client: Client, url: str, body: dict | None = None):
    return client.post(url, json.dumps(body or {}), content_type="application/json")


@pytest.mark.parametrize("role", ROLES)
def test_each_role_sees_the_list_and_the_job_as_the_policy_says(users, role):
    job = asking_job(users["owner"])
    client = client_of(users[role])
    listed = client.get("/jobs/").json()
    assert [row["id"] for row in listed["jobs"]] == ([job.pk] if SEES[role] else [])
    shown = client.get(f"/jobs/{job.pk}/")
    assert shown.status_code == (200 if SEES[role] else 404)
    if SEES[role]:
        assert shown.json()["user_message"].startswith("shop.example already serves")
        assert [action["id"] for action in shown.json()["actions"]] == ["overwrite", "keep"]
    else:
        assert shown.json()["code"] == "job_not_found"
    events = client.get(f"/jobs/{job.pk}/events/")
    assert events.status_code == (200 if SEES[role] else 404)


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("act", ["answer", "cancel", "retry"])
def test_each_role_acts_on_the_job_as_the_policy_says(users, role, act):
    job = asking_job(users["owner"])
    response = post(client_of(users[role]), f"/jobs/{job.pk}/{act}/", {"action": "overwrite"})
    job.refresh_from_db()
    if not SEES[role]:
        assert (response.status_code, response.json()["code"]) == (404, "job_not_found")
        assert job.status == Status.NEEDS_USER
        return
    assert response.status_code == 200, response.content
    expected = {"answer": Status.QUEUED, "cancel": Status.CANCELLED, "retry": Status.QUEUED}[act]
    assert response.json()["status"] == job.status == expected
    assert JobLog.objects.filter(job=job, line__contains=users[role].username).exists()


def test_an_answer_resumes_the_job_and_its_run_sees_the_action(users):
    job = asking_job(users["owner"])
    response = post(client_of(users["owner"]), f"/jobs/{job.pk}/answer/", {"action": "keep"})
    assert response.json()["can_resume"] is False
    drain()
    job.refresh_from_db()
    assert (job.status, job.result) == (Status.DONE, {"deployed": False})
    lines = list(JobLog.objects.filter(job=job).values_list("line", flat=True))
    assert "The existing site was kept; nothing deployed." in lines
    assert any("owner" in line and "Keep the existing site" in line for line in lines)


def test_a_post_without_the_csrf_token_is_refused_under_session_auth(users):
    job = asking_job(users["owner"])
    response = post(client_of(users["owner"], csrf=True), f"/jobs/{job.pk}/cancel/")
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.status == Status.NEEDS_USER


@pytest.mark.parametrize(
    "body, code",
    [
        ({"action": "deploy_anyway"}, "invalid_input"),
        ({}, "invalid_input"),
        ({"action": ["overwrite"]}, "invalid_input"),
        ({"action": "overwrite", "data": float("nan")}, "invalid_input"),
    ],
)
def test_an_answer_not_offered_is_refused_and_the_job_unchanged(users, body, code):
    job = asking_job(users["owner"])
    response = client_of(users["owner"]).post(
        f"/jobs/{job.pk}/answer/", json.dumps(body, allow_nan=True), content_type="application/json"
    )
    assert (response.status_code, response.json()["code"]) == (400, code)
    job.refresh_from_db()
    assert job.status == Status.NEEDS_USER


def test_what_the_status_does_not_allow_is_a_conflict_and_changes_nothing(users):
    job = asking_job(users["owner"])
    client = client_of(users["owner"])
    assert post(client, f"/jobs/{job.pk}/cancel/").status_code == 200
    for act, code in [("cancel", "job_not_cancellable"), ("retry", "job_not_retryable")]:
        response = post(client, f"/jobs/{job.pk}/{act}/", {"action": "keep"})
        assert (response.status_code, response.json()["code"]) == (409, code)
    response = post(client, f"/jobs/{job.pk}/answer/", {"action": "keep"})
    assert (response.status_code, response.json()["code"]) == (409, "job_not_resumable")
    job.refresh_from_db()
    assert job.status == Status.CANCELLED


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"action": "keep"', b"\xff\xfe"])
def test_a_body_that_is_not_a_json_object_is_refused(users, body):
    job = asking_job(users["owner"])
    response = client_of(users["owner"]).post(
        f"/jobs/{job.pk}/answer/", body, content_type="application/json"
    )
    assert (response.status_code, response.json()["code"]) == (400, "invalid_input")
    job.refresh_from_db()
    assert job.status == Status.NEEDS_USER


def test_a_huge_body_is_refused_before_it_is_read(users):
    job = asking_job(users["owner"])
    body = json.dumps({"action": "overwrite", "data": "x" * 5_000_000})
    response = client_of(users["owner"]).post(
        f"/jobs/{job.pk}/answer/", body, content_type="application/json"
    )
    assert (response.status_code, response.json()["code"]) == (413, "too_large")
    job.refresh_from_db()
    assert job.status == Status.NEEDS_USER


@pytest.mark.parametrize("job_id", ["0", "-1", "abc", "1e3", "99999999999999999999999", "%C3%A9", "12345678"])
def test_unknown_or_malformed_ids_are_not_found(users, job_id):
    client = client_of(users["owner"])
    for url in (f"/jobs/{job_id}/", f"/jobs/{job_id}/events/"):
        response = client.get(url)
        assert (response.status_code, response.json()["code"]) == (404, "job_not_found")
    response = post(client, f"/jobs/{job_id}/cancel/")
    assert (response.status_code, response.json()["code"]) == (404, "job_not_found")


def test_the_list_filters_and_pages(users):
    owner = users["owner"]
    first, _ = enqueue(
        "browser_renew_certificate", subject={"domain": "a.example"}, created_by=owner, group_id="team-1"
    )
    second, _ = enqueue(
        "browser_renew_certificate",
        subject={"domain": "b.example"},
        created_by=owner,
        subject_type="site",
        subject_id="b",
    )
    client = client_of(owner)
    assert [row["id"] for row in client.get("/jobs/?group=team-1").json()["jobs"]] == [first.pk]
    assert [row["id"] for row in client.get("/jobs/?subject_type=site&subject_id=b").json()["jobs"]] == [
        second.pk
    ]
    assert client.get("/jobs/?status=done").json()["count"] == 0
    paged = client.get("/jobs/?per_page=1&page=2").json()
    assert (paged["count"], paged["pages"], [row["id"] for row in paged["jobs"]]) == (2, 2, [first.pk])
    bad = (
        "status=finished",
        "per_page=0",
        "per_page=1000",
        "page=x",
        "page=3",
        "parent=abc",
        "group=a%00b",
        "kind=%00",
    )
    for query in bad:
        response = client.get(f"/jobs/?{query}")
        assert (response.status_code, response.json()["code"]) == (400, "invalid_input"), query


def test_a_policy_setting_replaces_who_sees_and_acts(users, settings):
    settings.DURAJOBS = {"ACCESS_POLICY": "tests.testapp.access.TeamPolicy"}
    job, _ = enqueue("browser_renew_certificate", subject={"domain": "a.example"}, group_id="team-other")
    mine, _ = enqueue("browser_renew_certificate", subject={"domain": "b.example"}, group_id="team-owner")
    client = client_of(users["owner"])
    assert [row["id"] for row in client.get("/jobs/").json()["jobs"]] == [mine.pk]
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    response = post(client, f"/jobs/{mine.pk}/cancel/")
    assert (response.status_code, response.json()["code"]) == (403, "not_permitted")
    assert Job.objects.get(pk=mine.pk).status == Status.QUEUED


@pytest.mark.parametrize("ending", ["ask", "raise_in_step", "done"])
def test_what_the_endpoints_show_is_redacted_as_the_admin_shows_it(users, ending):
    secret = "password=Hunter2-FAKE-9f3c"
    job, _created = enqueue(
        "secrets_everywhere", subject={"text": secret, "ending": ending}, created_by=users["owner"]
    )
    drain()
    client = client_of(users["owner"])
    shown = client.get(f"/jobs/{job.pk}/").content.decode()
    streamed = client.get(f"/jobs/{job.pk}/events/").content.decode()
    listed = client.get("/jobs/").content.decode()
    assert json.loads(shown)["log"] and "config" in shown  # the log and the step's result are there
    for text in (shown, streamed, listed):
        assert "Hunter2-FAKE-9f3c" not in text
