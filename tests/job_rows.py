"""What a job left in the database, read the same way by every test that checks it."""

from __future__ import annotations

from collections import Counter

from django_durajobs import Job, JobLog, JobStep
from django_durajobs.status import Phase


def ended(job_id: int) -> bool:
    """Whether the job is in a terminal status, as the model judges it."""
    return Job.objects.get(pk=job_id).is_terminal


def statuses(job_ids) -> Counter:
    """How many of the jobs are in each status."""
    return Counter(Job.objects.filter(pk__in=job_ids).values_list("status", flat=True))


def step_rows(job_id: int, phase: str = Phase.RUN) -> dict[str, JobStep]:
    """The job's step rows of one phase, by step id."""
    return {step.step_id: step for step in JobStep.objects.filter(job_id=job_id, phase=phase)}


def log_lines(job_id: int) -> list[str]:
    """The job's log, oldest line first."""
    return list(JobLog.objects.filter(job_id=job_id).order_by("id").values_list("line", flat=True))


def children_of(parent: Job) -> list[Job]:
    """The parent's children, in the order they were created."""
    return list(Job.objects.filter(parent_id=parent.pk).order_by("id"))


def fresh(job: Job) -> Job:
    """The job as the database has it now."""
    return Job.objects.get(pk=job.pk)
