"""The JSON endpoints: the jobs a request sees, one job's ``describe()``, and what its owner may
do to it (answer its question, cancel it, retry it).

Whether an operation is allowed now is the operations' own decision (the transitions table,
as ``describe()``'s ``can_*`` show it); whether this user may ask is the access policy's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.paginator import EmptyPage, Paginator
from django.http import HttpRequest, JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from .. import ops
from ..access import access_policy
from ..engine.describe import describe, row_summaries
from ..errors import JobError
from ..models import Job
from ..store import find_jobs
from ..values import short_repr, to_job_id
from .replies import json_body, query_texts, refusal, visible_job

#: Jobs a page of the list holds, unless ``per_page`` asks for fewer (or more, up to ``MAX_PER_PAGE``).
PER_PAGE = 20
MAX_PER_PAGE = 100
#: The list's filters that compare a column as it is.
COLUMN_FILTERS = {"group": "group_id", "subject_type": "subject_type", "subject_id": "subject_id"}


def _number(request: HttpRequest, name: str, default: int, highest: int) -> int:
    text = request.GET.get(name, str(default))
    if not (text.isascii() and text.isdecimal() and 0 < int(text) <= highest):
        message = _("%(name)s is a whole number from 1 to %(highest)s, not %(value)s.")
        raise JobError(
            "invalid_input", message % {"name": name, "highest": highest, "value": short_repr(text)}
        )
    return int(text)


def _filtered(request: HttpRequest) -> Any:
    jobs = find_jobs(
        statuses=query_texts(request, "status"),
        kinds=query_texts(request, "kind"),
        parent=to_job_id(request.GET["parent"], _("The parent")) if request.GET.get("parent") else None,
    )
    for name, column in COLUMN_FILTERS.items():
        for text in query_texts(request, name):
            jobs = jobs.filter(**{column: text})
    return access_policy().visible(request, jobs)


@never_cache
@require_GET
def job_list(request: HttpRequest) -> JsonResponse:
    """``GET /jobs/``: the visible jobs, newest first, a page at a time (``?page=``, ``?per_page=``),
    filtered by ``status``, ``kind`` (each may repeat), ``group``, ``subject_type``,
    ``subject_id`` and ``parent``."""
    try:
        per_page = _number(request, "per_page", PER_PAGE, MAX_PER_PAGE)
        number = _number(request, "page", 1, 1_000_000)
        pages = Paginator(_filtered(request), per_page)
        page = pages.page(number)
    except JobError as error:
        return refusal(error)
    except EmptyPage:
        return refusal(JobError("invalid_input", _("There is no page %(page)s.") % {"page": number}))
    return JsonResponse(
        {
            "count": pages.count,
            "page": number,
            "pages": pages.num_pages,
            "jobs": row_summaries(list(page.object_list)),
        }
    )


@never_cache
@require_GET
def job_detail(request: HttpRequest, job_id: str) -> JsonResponse:
    """``GET /jobs/<id>/``: the job's ``describe()``."""
    try:
        return JsonResponse(describe(visible_job(request, job_id)))
    except JobError as error:
        return refusal(error)


def _acting(
    act: str, operate: Callable[[Job, HttpRequest, dict[str, Any]], Any]
) -> Callable[..., JsonResponse]:
    """A POST endpoint that does ``act`` to a visible job the policy lets this user act on, and
    answers its new ``describe()``; the job's log names the user."""

    @never_cache
    @require_POST
    def view(request: HttpRequest, job_id: str) -> JsonResponse:
        try:
            job = visible_job(request, job_id)
            if not access_policy().may(request, job, act):
                raise JobError("not_permitted", _("You may not change this job."))
            operate(job, request, json_body(request))
            return JsonResponse(describe(job.pk))
        except JobError as error:
            return refusal(error)

    view.__name__ = view.__qualname__ = f"job_{act}"
    return view


def _answer(job: Job, request: HttpRequest, body: dict[str, Any]) -> None:
    action = body.get("action")
    if not isinstance(action, str) or not action:
        message = _("An answer names one of the job's actions in action, not %(value)s.")
        raise JobError("invalid_input", message % {"value": short_repr(action)})
    ops.resume(job, by=request.user, action=action, data=body.get("data"))


job_answer = _acting("answer", _answer)
job_cancel = _acting("cancel", lambda job, request, body: ops.cancel(job, by=request.user))
job_retry = _acting("retry", lambda job, request, body: ops.retry(job, by=request.user))
