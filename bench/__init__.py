"""The benchmark of django-durajobs against a minimal raw-SQL queue: ``python bench/run.py``."""
