"""``python -m tests.child_run_telemetry MODE ARGS``: ``manage.py ARGS`` with telemetry as MODE says.

- ``without``: ``import opentelemetry`` fails, as where django-durajobs' ``otel`` extra is not
  installed.
- ``export=PATH``: an OpenTelemetry SDK writes every finished span to PATH, one JSON document
  each (``ReadableSpan.to_json``), as a real worker's exporter would send them on.
"""

from __future__ import annotations

import sys

mode, args = sys.argv[1], sys.argv[2:]
if mode == "without":
    sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # makes every "import opentelemetry…" raise
else:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

    out = open(mode.removeprefix("export="), "a")  # noqa: SIM115  (open for the process's life)
    provider = TracerProvider()
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

from django.core.management import execute_from_command_line  # noqa: E402

execute_from_command_line(["manage.py", *args])
