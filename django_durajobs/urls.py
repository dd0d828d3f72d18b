"""The end users' endpoints: ``path("jobs/", include("django_durajobs.urls"))`` (docs/end-users.md)."""

from django.urls import path

from .views.jobs import job_answer, job_cancel, job_detail, job_list, job_retry
from .views.stream import group_events, job_events

app_name = "durajobs"

urlpatterns = [
    path("", job_list, name="list"),
    path("events/", group_events, name="group_events"),
    path("<str:job_id>/", job_detail, name="detail"),
    path("<str:job_id>/events/", job_events, name="events"),
    path("<str:job_id>/answer/", job_answer, name="answer"),
    path("<str:job_id>/cancel/", job_cancel, name="cancel"),
    path("<str:job_id>/retry/", job_retry, name="retry"),
]
