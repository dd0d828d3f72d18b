"""Scenario 5, model-based: a Hypothesis state machine over the public operations — enqueue, run
the due jobs, a worker lost mid-run, pause, resume, retry, cancel, send an event — on the real
database, with the oracle's invariants checked after every rule.

A lost worker is played in this process: a job is claimed under a worker id that then never
comes back, and ``recover(worker_id=…)`` hands it back, as a live worker does for a dead one.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from django_durajobs import (
    Job,
    JobError,
    Status,
    cancel,
    drain,
    enqueue,
    pause,
    recover,
    resume,
    retry,
    send_event,
    store,
)
from tests.proving.ledger import LEDGER_ENV
from tests.proving.ledger import read as read_ledger
from tests.proving.oracle import judge
from tests.testapp import kinds_proving
from tests.testapp.models import SideEffect

#: Hypothesis examples, short and full (the issue asks for at least 2,000 in the full run).
EXAMPLES = {True: 60, False: 2000}
EVENTS = ("ready", "paid")
KINDS = st.sampled_from(["prove_steps", "prove_async", "prove_wait"])


class Operations(RuleBasedStateMachine):
    """The model: which jobs exist and which worker ids were lost; the database is the system."""

    jobs = Bundle("jobs")
    totals = {"jobs": 0, "done": 0, "starts": 0, "lost": 0}

    def __init__(self):
        super().__init__()
        Job.objects.all().delete()
        SideEffect.objects.all().delete()
        self.ledger = Path(tempfile.mkdtemp(prefix="prove-model-"))
        os.environ[LEDGER_ENV] = str(self.ledger)
        self.paused_starts: dict[int, int] = {}

    def teardown(self):
        self.totals["done"] += Job.objects.filter(status=Status.DONE).count()
        self.totals["starts"] += sum(entry.event == "start" for entry in read_ledger(self.ledger))
        os.environ.pop(LEDGER_ENV, None)
        shutil.rmtree(self.ledger, ignore_errors=True)

    @rule(target=jobs, kind=KINDS, event=st.sampled_from(EVENTS))
    def enqueue(self, kind, event):
        self.totals["jobs"] += 1
        return enqueue(kind, subject={"event": event})[0].pk if kind == "prove_wait" else enqueue(kind)[0].pk

    @rule()
    def run_due_jobs(self):
        drain(max_jobs=20)

    @rule()
    def lose_a_worker(self):
        """Claim the next due job under a worker that dies at once; recover it as a live worker would."""
        worker_id = store.new_worker_id("lost")
        lease = store.claim(worker_id)
        if lease is not None:
            self.totals["lost"] += 1
            assert recover(worker_id=worker_id) == 1

    @rule(job=jobs, operation=st.sampled_from([pause, resume, retry, cancel]))
    def operate(self, job, operation):
        try:
            operation(job)
        except JobError as error:
            assert error.code, error  # a refusal says why, with a code

    @rule(name=st.sampled_from(EVENTS))
    def send(self, name):
        send_event(name, {"event": name})

    @invariant()
    def promises_hold(self):
        entries = read_ledger(self.ledger)
        done = Job.objects.filter(status=Status.DONE).values_list("pk", flat=True)
        assert judge(entries, done, {}) == []

    @invariant()
    def a_paused_job_starts_no_step(self):
        entries = read_ledger(self.ledger)
        for pk in Job.objects.filter(status=Status.PAUSED).values_list("pk", flat=True):
            starts = sum(entry.job == pk and entry.event == "start" for entry in entries)
            assert starts == self.paused_starts.setdefault(pk, starts), f"paused job {pk} started a step"
        for pk in list(self.paused_starts):
            if not Job.objects.filter(pk=pk, status=Status.PAUSED).exists():
                del self.paused_starts[pk]


@pytest.mark.django_db(transaction=True)
def test_model(short, report, monkeypatch):
    monkeypatch.setattr(kinds_proving, "STEP_SECONDS", (0, 0))  # in one process, time is not the point
    machine = Operations.TestCase
    machine.settings = settings(
        max_examples=EXAMPLES[short],
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    machine().runTest()
    totals = Operations.totals
    report(**totals, kills=totals["lost"], restarts=0, examples=EXAMPLES[short], violations=0)
