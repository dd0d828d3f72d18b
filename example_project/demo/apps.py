from django.apps import AppConfig


class DemoConfig(AppConfig):
    """The demo shop and hosting company whose operations run as durable jobs (see ``jobs.py``)."""

    name = "example_project.demo"
    label = "demo"
    verbose_name = "Demo: shop and hosting"
    default_auto_field = "django.db.models.BigAutoField"
