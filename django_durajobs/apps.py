from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class DurajobsConfig(AppConfig):
    name = "django_durajobs"
    verbose_name = _("Durable jobs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)

        # Like admin.py: every installed app's jobs.py registers its kinds.
        autodiscover_modules("jobs")
