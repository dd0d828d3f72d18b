"""What the job list shows of each job beyond its row, for a page of jobs at once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import store
from ..engine.progress import progress_of


def prepare_rows(jobs: Sequence[Any]) -> None:
    """What the list's columns show beyond each job's row, for a page of jobs in a few grouped
    queries: why a limit holds a job back, its progress by its steps, its family's counts (set on
    each ``Job`` as ``held_back_reason``, ``shown_progress`` and ``family``)."""
    reasons = store.held_back_reasons(jobs)
    ids = [job.pk for job in jobs]
    steps = store.step_counts(ids)
    families = store.children_counts(ids)
    for job in jobs:
        job.held_back_reason = reasons.get(job.pk)
        done, total = steps.get((job.pk, job.phase), (0, 0))
        job.shown_progress = progress_of(job.status, job.progress, done, total)
        job.family = families.get(job.pk)
