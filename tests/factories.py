"""factory-boy factories: build a job directly in any state, without running it.

    JobFactory()                                     # queued, due now, kind "states_basic"
    JobFactory(status="failed", error="boom")        # ended, attempt 1, error_code "failed"
    JobFactory(status="running", locked_by="w", lease_token="t", locked_at=now)
    JobFactory(status="awaiting_external", next_run_at=resume_at, eta_at=resume_at)
    JobFactory(status="running", step_states={"first": "done", "second": "running"})
    JobStepFactory(job=job, step_id="extra", state="done", result={"x": 1})

The fields a status implies (``attempt``, lease fields, ``ended_at``, ``phase``, a wait reason,
a question with actions…) follow from ``status`` and can each be overridden. Like ``enqueue()``,
the factory creates the kind's declared steps as pending ``JobStep`` rows (``declared_steps=False``
skips that); ``step_states`` sets some of them to other states.

``insert_copies(job, n)`` copies a job ``n`` times in one statement, for tests that need a big table.
"""

from __future__ import annotations

import uuid

import factory
from django.db import connection
from django.utils import timezone

from django_durajobs import Job, JobError, JobStep, Status
from django_durajobs.registry import get_kind
from django_durajobs.status import TERMINAL, WAITING

# A claim counts a try; a wait, a question or retry_later hands it back (DESIGN.md, attempt semantics).
TRIED = frozenset({Status.RUNNING, Status.DONE, Status.FAILED, Status.REVERTING, Status.REVERTED})
NOT_STARTED = frozenset({Status.QUEUED, Status.PAUSED, Status.CANCELLED})
REVERT_PHASE = frozenset({Status.REVERTING, Status.REVERTED})


def _kind_title(kind: str) -> str:
    try:
        return get_kind(kind).title
    except JobError:
        return kind


def _if(condition, value, otherwise):
    return value if condition else otherwise


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job
        skip_postgeneration_save = True

    class Params:
        now = factory.LazyFunction(timezone.now)
        worker = "factory-worker"

    kind = "states_basic"
    label = factory.LazyAttribute(lambda o: _kind_title(o.kind))
    status = Status.QUEUED
    phase = factory.LazyAttribute(lambda o: _if(o.status in REVERT_PHASE, "revert", "run"))
    subject = factory.LazyFunction(dict)

    attempt = factory.LazyAttribute(lambda o: _if(o.status in TRIED, 1, 0))
    max_attempts = 1
    # Queued jobs and pending reverts are due now; a wait has no resume_at unless given one.
    next_run_at = factory.LazyAttribute(
        lambda o: _if(o.status in (Status.QUEUED, Status.REVERTING), o.now, None)
    )

    # Only a running job holds a lease (a pending revert waits unlocked for a worker).
    locked_by = factory.LazyAttribute(lambda o: _if(o.status == Status.RUNNING, o.worker, ""))
    locked_at = factory.LazyAttribute(lambda o: _if(o.status == Status.RUNNING, o.now, None))
    lease_token = factory.LazyAttribute(lambda o: _if(o.status == Status.RUNNING, uuid.uuid4().hex, ""))

    result = factory.LazyAttribute(lambda o: _if(o.status == Status.DONE, {"ok": True}, None))
    progress = factory.LazyAttribute(lambda o: _if(o.status == Status.DONE, 100, 0))
    error = factory.LazyAttribute(lambda o: _if(o.status == Status.FAILED, "Failed (built by a factory)", ""))
    error_code = factory.LazyAttribute(lambda o: _if(o.status == Status.FAILED and o.error, "failed", ""))
    wait_reason = factory.LazyAttribute(
        lambda o: _if(
            o.status in WAITING and o.status not in (Status.NEEDS_USER, Status.PAUSED),
            "Waiting (factory)",
            "",
        )
    )
    user_message = factory.LazyAttribute(
        lambda o: _if(o.status == Status.NEEDS_USER, "Overwrite the existing site?", "")
    )
    actions = factory.LazyAttribute(
        lambda o: _if(o.status == Status.NEEDS_USER, [{"id": "approve", "label": "Approve"}], None)
    )

    started_at = factory.LazyAttribute(lambda o: _if(o.status in NOT_STARTED, None, o.now))
    ended_at = factory.LazyAttribute(lambda o: _if(o.status in TERMINAL, o.now, None))

    @factory.post_generation
    def declared_steps(obj, create, extracted, **kwargs):
        """The kind's declared steps as pending rows, like ``enqueue()`` (``declared_steps=False``: none)."""
        if not create or extracted is False:
            return
        try:
            steps = get_kind(obj.kind).steps
        except JobError:
            steps = ()
        JobStep.objects.bulk_create(
            JobStep(job=obj, phase="run", position=position, step_id=step_id, title=title)
            for position, (step_id, title) in enumerate(steps)
        )

    @factory.post_generation
    def step_states(obj, create, extracted, **kwargs):
        """``step_states={"first": "done"}``: put declared run steps in those states (done ones get times)."""
        if not create or not extracted:
            return
        now = timezone.now()
        for step_id, state in extracted.items():
            fields = {"state": state}
            if state != "pending":
                fields["started_at"] = now
            if state == "done":
                fields["ended_at"] = now
            updated = JobStep.objects.filter(job=obj, phase="run", step_id=step_id).update(**fields)
            assert updated, f"{obj.kind} declares no step {step_id!r}"


class JobStepFactory(factory.django.DjangoModelFactory):
    """A checkpoint row; ``position`` follows the job's existing steps of the same phase."""

    class Meta:
        model = JobStep
        skip_postgeneration_save = True

    job = factory.SubFactory(JobFactory, declared_steps=False)
    phase = "run"
    step_id = factory.Sequence(lambda n: f"step_{n}")
    title = factory.LazyAttribute(lambda o: o.step_id.replace("_", " ").capitalize())
    state = "pending"
    position = factory.LazyAttribute(lambda o: JobStep.objects.filter(job=o.job, phase=o.phase).count())
    started_at = factory.LazyAttribute(lambda o: _if(o.state != "pending", timezone.now(), None))
    ended_at = factory.LazyAttribute(lambda o: _if(o.state in ("done", "failed"), timezone.now(), None))
    result = None


DIGITS = " UNION ALL ".join(f"SELECT {digit} AS d" for digit in range(10))


def insert_copies(template: Job, copies: int) -> None:
    """Copy a job ``copies`` times (at most 100,000) in one INSERT … SELECT over cross-joined digits."""
    assert 0 < copies <= 100_000
    quote = connection.ops.quote_name
    table = quote(Job._meta.db_table)
    columns = [field.column for field in Job._meta.concrete_fields if not field.primary_key]
    digits = ", ".join(f"({DIGITS}) {quote(f'd{n}')}" for n in range(5))
    number = " + ".join(f"{10**n} * {quote(f'd{n}')}.d" for n in range(5))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(quote(c) for c in columns)}) "
            f"SELECT {', '.join('t.' + quote(c) for c in columns)} FROM {table} t, {digits} "
            f"WHERE t.{quote('id')} = %s AND {number} < %s",
            [template.pk, copies],
        )
