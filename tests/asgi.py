"""The test project's ASGI application, served by uvicorn in tests/e2e/test_async_asgi.py."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

application = get_asgi_application()
