"""Job kinds the test suite runs, registered by autodiscovery in every process (child processes too)."""

from . import kinds_durability, kinds_inputs, kinds_states  # noqa: F401
