"""The list's action "Rerun from a step": one job, a step chosen on a page of its own, a new job."""

from __future__ import annotations

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy as _

from ..errors import JobError
from ..models import Job, JobStep
from ..reruns import rerun
from ..status import Phase
from .actions import _user_id
from .display import JobAdminParts


class RerunMixin(JobAdminParts):
    """``rerun_jobs``, for ``JobAdmin``: needs ``operate_job``, as a retry does."""

    @admin.action(description=_("Rerun from a step"), permissions=["operate"])
    def rerun_jobs(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        jobs = list(queryset.order_by("pk")[:2])
        if len(jobs) != 1:
            self.message_user(request, _("Select one job to rerun from a step."), messages.WARNING)
            return None
        [job] = jobs
        from_step = request.POST.get("from_step")
        if not from_step:
            return self._choose_step(request, job)
        try:
            again = rerun(job, from_step=from_step, by=request.user)
        except JobError as refused:
            self.message_user(request, str(refused), messages.ERROR)
            return None
        LogEntry.objects.log_actions(
            _user_id(request), [job], CHANGE, change_message=f"rerun from {from_step}"
        )
        LogEntry.objects.log_actions(
            _user_id(request), [again], ADDITION, change_message=f"rerun of {job.pk}"
        )
        link = format_html(
            '<a href="{}">#{}</a>', reverse("admin:django_durajobs_job_change", args=[again.pk]), again.pk
        )
        message = _("Job %(job)s runs again from step %(step)s as job %(new)s.") % {
            "job": job.pk,
            "step": conditional_escape(from_step),
            "new": link,
        }
        self.message_user(request, mark_safe(message), messages.SUCCESS)  # its values are escaped
        return None

    def _choose_step(self, request: HttpRequest, job: Job) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "title": _("Rerun from a step"),
            "opts": self.model._meta,
            "job": job,
            "steps": JobStep.objects.filter(job=job, phase=Phase.RUN).order_by("position"),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "post_url": request.get_full_path(),
        }
        return TemplateResponse(request, "admin/django_durajobs/job/rerun.html", context)
