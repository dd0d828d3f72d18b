"""The end users' endpoints (``django_durajobs.urls``): thin glue over the operations and
``describe()``, every request checked against the access policy (``access.py``)."""
