"""Job kinds the test suite runs, registered by autodiscovery in every process (child processes too)."""

from . import (  # noqa: F401
    kinds_browser,
    kinds_database,
    kinds_durability,
    kinds_family,
    kinds_fleet,
    kinds_inputs,
    kinds_lifecycle,
    kinds_limits,
    kinds_secrets,
    kinds_states,
)
