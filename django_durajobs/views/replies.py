"""What the end users' endpoints answer: JSON bodies, refusals with a code, the job a request may see."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.utils.translation import gettext as _

from ..access import access_policy
from ..conf import get_setting
from ..errors import JobError
from ..models import Job
from ..values import check_text, to_job_id

#: The HTTP status each refusal's code is answered with; other codes are a conflict (409).
HTTP_STATUS = {"job_not_found": 404, "invalid_input": 400, "not_permitted": 403, "too_large": 413}
#: Room for the keys around the data of an answer.
BODY_OVERHEAD_BYTES = 4_096


def refusal(error: JobError) -> JsonResponse:
    return JsonResponse({"code": error.code, "error": str(error)}, status=HTTP_STATUS.get(error.code, 409))


def not_found(job_id: Any) -> JobError:
    return JobError("job_not_found", _("Job %(job)s does not exist.") % {"job": job_id})


def visible_job(request: HttpRequest, job_id: str) -> Job:
    """The job ``job_id`` names if the policy shows it to this request; ``job_not_found`` otherwise,
    so a hidden job cannot be told from a missing one."""
    try:
        pk = to_job_id(job_id)
    except JobError:
        raise not_found(job_id) from None
    job = access_policy().visible(request, Job.objects.filter(pk=pk)).first()
    if job is None:
        raise not_found(pk)
    return job


def query_texts(request: HttpRequest, name: str) -> list[str]:
    """The texts of the query's parameter ``name``; ``invalid_input`` for one no database can compare
    (a NUL character, a lone surrogate)."""
    return [check_text(text, name) for text in request.GET.getlist(name)]


def json_body(request: HttpRequest) -> dict[str, Any]:
    """The request's body: a JSON object (or nothing); ``invalid_input`` or ``too_large`` otherwise,
    checked before the body is read when its length says it is too big."""
    limit = get_setting("MAX_RESUME_DATA_BYTES") + BODY_OVERHEAD_BYTES
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > limit:
        message = _("The request's body is at most %(limit)s bytes.") % {"limit": f"{limit:,}"}
        raise JobError("too_large", message)
    raw = request.body
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise JobError("invalid_input", _("The request's body is not JSON.")) from None
    if not isinstance(body, dict):
        raise JobError("invalid_input", _("The request's body is a JSON object."))
    return body
