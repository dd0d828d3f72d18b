from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DemoConfig(AppConfig):
    """The demo shop and hosting company whose operations run as durable jobs (see ``jobs.py``)."""

    name = "example_project.demo"
    label = "demo"
    verbose_name = _("Demo: shop and hosting")
    default_auto_field = "django.db.models.BigAutoField"
