"""``{% job_widget job %}`` as a project's page renders it: the job the request sees with its
endpoints and the buttons the policy allows, nothing for a job it may not see, and the job's own
texts kept out of the HTML."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import AnonymousUser, User
from django.template import Context, Template
from django.test import RequestFactory

from django_durajobs import Job, drain, enqueue
from example_project.demo.models import Site

pytestmark = pytest.mark.django_db

PAGE = Template("{% load durajobs_widget %}{% job_widget job %}")


def rendered(job, user) -> str:
    request = RequestFactory().get("/my-deploys/")
    request.user = user
    return PAGE.render(Context({"job": job, "request": request}))


def widget_data(html: str) -> dict:
    start = html.index('<script type="application/json">') + len('<script type="application/json">')
    return json.loads(html[start : html.index("</script>", start)])


def test_the_owner_gets_the_job_its_endpoints_and_its_buttons():
    owner = User.objects.create_user("owner")
    job, _ = enqueue(
        "browser_deploy_site", subject={"domain": "shop.example", "occupied": True}, created_by=owner
    )
    drain()
    html = rendered(job, owner)
    data = widget_data(html)
    assert data["summary"]["status"] == "needs_user"
    assert data["urls"]["events"] == f"/jobs/{job.pk}/events/"
    assert data["may"] == {"answer": True, "cancel": True, "retry": True}
    assert 'role="progressbar"' in html and "widget.js" in html


def test_a_job_the_request_may_not_see_renders_nothing():
    owner = User.objects.create_user("owner")
    job, _ = enqueue("browser_renew_certificate", subject={"domain": "a.example"}, created_by=owner)
    assert rendered(job, User.objects.create_user("other")) == ""
    assert rendered(job.pk, AnonymousUser()) == ""
    assert rendered(987654, owner) == ""


def test_the_jobs_own_texts_never_become_html():
    owner = User.objects.create_user("owner")
    label = '</script><img src=x onerror="alert(1)">'
    job, _ = enqueue(
        "browser_renew_certificate", subject={"domain": "a.example"}, label=label, created_by=owner
    )
    html = rendered(job, owner)
    assert "<img" not in html and "</script><" not in html
    assert widget_data(html)["summary"]["label"] == label


def test_a_customer_starts_a_deploy_on_the_examples_page_and_sees_only_their_jobs(client, settings):
    settings.ROOT_URLCONF = "example_project.urls"
    Site.objects.create(domain="shop.example.com")
    customer = User.objects.create_user("customer")
    enqueue("browser_renew_certificate", subject={"domain": "theirs.example"}, label="Not mine")
    assert client.get("/my-deploys/")["Location"].startswith("/login/?next=")
    client.force_login(customer)
    response = client.post("/my-deploys/", {"site": "shop.example.com", "version": "1.2.0"})
    assert response.status_code == 302
    job = Job.objects.get(created_by=customer)
    assert (job.kind, job.subject) == ("deploy_site", {"domain": "shop.example.com", "version": "1.2.0"})
    page = client.get("/my-deploys/").content.decode()
    assert page.count("data-durajobs-widget") == 1 and "Not mine" not in page
    refused = client.post("/my-deploys/", {"site": "shop.example.com", "version": "1.2; rm -rf /"})
    assert refused.status_code == 200 and Job.objects.filter(created_by=customer).count() == 1
