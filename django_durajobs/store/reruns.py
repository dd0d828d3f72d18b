"""Writing a rerun: a new job that starts with the checkpoints of the steps before the chosen one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import transaction

from ..models import Job, JobStep
from ..status import Phase, StepState
from .enqueuing import enqueue
from .log import append_log


def insert_rerun(
    original: Job, reused: list[JobStep], fields: dict[str, Any], lines: Callable[[int], tuple[str, str]]
) -> Job:
    """Enqueue the rerun of ``original`` (``fields`` are ``enqueue``'s), with the ``reused`` steps'
    checkpoints done, and log ``lines(new id)`` (the original's line, the rerun's); all in one
    transaction, so no worker sees the new job before its checkpoints."""
    with transaction.atomic():
        rerun, _created = enqueue(original.kind, **fields)
        Job.objects.filter(pk=rerun.pk).update(rerun_of=original.pk)
        rerun.rerun_of_id = original.pk
        declared = {step.step_id: step for step in JobStep.objects.filter(job=rerun, phase=Phase.RUN)}
        position = len(declared)
        for step in reused:
            row = declared.get(step.step_id)
            if row is None:
                row = JobStep(job=rerun, phase=Phase.RUN, position=position, step_id=step.step_id)
                position += 1
            row.title, row.state, row.result = step.title, StepState.DONE, step.result
            row.started_at, row.ended_at, row.detail = step.started_at, step.ended_at, ""
            row.save()
        original_line, rerun_line = lines(rerun.pk)
        append_log(original.pk, original_line)
        append_log(rerun.pk, rerun_line)
    return rerun
