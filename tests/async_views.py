"""Async views of the test project that enqueue and operate jobs with the async operations, as an
ASGI application would (tests/e2e/test_async_asgi.py). Test endpoints: no authentication."""

from __future__ import annotations

import json

from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from django_durajobs import JobError, acancel, adescribe, aenqueue

REFUSED_STATUS = {"job_not_found": 404, "invalid_input": 400, "unknown_job_kind": 400}


def refused(exc: JobError) -> JsonResponse:
    return JsonResponse({"code": exc.code, "error": str(exc)}, status=REFUSED_STATUS.get(exc.code, 409))


@csrf_exempt
@require_POST
async def enqueue_job(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    try:
        job, created = await aenqueue(body["kind"], subject=body.get("subject"))
    except JobError as exc:
        return refused(exc)
    return JsonResponse({"id": job.pk, "created": created}, status=201 if created else 200)


@require_GET
async def show_job(request: HttpRequest, job_id: int) -> JsonResponse:
    try:
        return JsonResponse(await adescribe(job_id))
    except JobError as exc:
        return refused(exc)


@csrf_exempt
@require_POST
async def cancel_job(request: HttpRequest, job_id: int) -> JsonResponse:
    try:
        job = await acancel(job_id, by="asgi")
    except JobError as exc:
        return refused(exc)
    return JsonResponse({"id": job.pk, "status": job.status})


urlpatterns = [
    path("jobs/", enqueue_job),
    path("jobs/<int:job_id>/", show_job),
    path("jobs/<int:job_id>/cancel/", cancel_job),
]
