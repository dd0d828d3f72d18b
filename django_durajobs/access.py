"""Who sees and acts on which jobs through the end users' endpoints (``django_durajobs.urls``).

``DURAJOBS["ACCESS_POLICY"]`` names a subclass of ``AccessPolicy`` by its dotted path; the
default lets a user see and act on the jobs they created, and staff with the admin's
permissions see (``view_job``) and act on (``operate_job``) every job. The endpoints ask the
policy on the server for every request: a job it hides is answered as one that does not exist.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.module_loading import import_string

from .conf import get_setting
from .models import Job

#: What an end user may do to a job they see, besides watching it.
ACTS = ("answer", "cancel", "retry")


class AccessPolicy:
    """The default policy. Override ``visible`` (which jobs a request sees) and ``may`` (whether
    it may do one of ``ACTS`` to a job it sees), e.g. for team membership through ``group_id``."""

    def visible(self, request: HttpRequest, jobs: QuerySet[Job]) -> QuerySet[Job]:
        user: Any = request.user
        if not user.is_authenticated:
            return jobs.none()
        if user.is_staff and user.has_perm("django_durajobs.view_job"):
            return jobs
        return jobs.filter(created_by=user.pk)

    def may(self, request: HttpRequest, job: Job, act: str) -> bool:
        user: Any = request.user
        if user.is_staff and user.has_perm("django_durajobs.operate_job"):
            return True
        return user.is_authenticated and job.created_by_id == user.pk


@cache
def _policy(path: str) -> AccessPolicy:
    return import_string(path)()


def access_policy() -> AccessPolicy:
    """The policy ``DURAJOBS["ACCESS_POLICY"]`` names (default: ``AccessPolicy``)."""
    return _policy(get_setting("ACCESS_POLICY"))
