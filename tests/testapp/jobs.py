"""Job kinds the test suite runs, registered by autodiscovery in every process (child processes too)."""

from . import (  # noqa: F401
    kinds_async,
    kinds_browser,
    kinds_cli,
    kinds_concurrency,
    kinds_database,
    kinds_deadlines,
    kinds_durability,
    kinds_events,
    kinds_family,
    kinds_fleet,
    kinds_inputs,
    kinds_lifecycle,
    kinds_limits,
    kinds_proving,
    kinds_resume,
    kinds_schedules,
    kinds_secrets,
    kinds_states,
    kinds_telemetry,
    kinds_testing,
)
