from django.db import models


class SideEffect(models.Model):
    """A row a test job writes, so a test can count how often a step really ran."""

    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Ledger(models.Model):
    """One row per job that ran to its end: the unique constraint proves no job ran twice."""

    job_id = models.BigIntegerField(unique=True)
    worker_id = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.job_id} by {self.worker_id}"
