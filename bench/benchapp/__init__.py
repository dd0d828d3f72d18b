"""The no-op job kinds the benchmark runs (``jobs.py``, found by autodiscovery in every process)."""
