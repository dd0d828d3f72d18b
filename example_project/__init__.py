"""The example project: a Django project using django-durajobs, run by ``./scripts/demo``."""
