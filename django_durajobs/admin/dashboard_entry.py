"""The dashboard's entry on the admin's index (*Durable jobs › Jobs dashboard*): a link, for those
who may view jobs, to ``JobAdmin``'s dashboard."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.urls import path, reverse

from ..models import JobsDashboard


@admin.register(JobsDashboard)
class JobsDashboardAdmin(admin.ModelAdmin):
    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_durajobs.view_job")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view(self.changelist_view)
        return [path("", view, name="django_durajobs_jobsdashboard_changelist")]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponseRedirect:
        return HttpResponseRedirect(reverse("admin:django_durajobs_job_dashboard"))
