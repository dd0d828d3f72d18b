"""OpenTelemetry spans: a job's attempt span joins the trace of the request that enqueued it,
its steps are the attempt's children, with job id, kind, attempt and outcome; failures are
recorded redacted; sync, async and a real ``runjobs`` worker alike; a no-op without the API.
Kinds: ``tests/testapp/kinds_telemetry.py``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from django_durajobs import Job, Status, enqueue, enqueue_many
from django_durajobs.testing import clock, run_job
from tests.helpers import REPO_ROOT
from tests.spans import EXPORTER, finished_spans, named
from tests.testapp.kinds_telemetry import SECRET

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def exported():
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def enqueued_in_a_request(kind: str, **kwargs):
    """Enqueue ``kind`` inside a span, as a traced view would; the job and the span."""
    with trace.get_tracer("tests").start_as_current_span("POST /orders/") as request:
        job, _ = enqueue(kind, **kwargs)
    return job, request


def test_the_attempt_joins_the_request_trace_and_the_steps_are_its_children():
    job, request = enqueued_in_a_request("traced_steps")
    assert job.traceparent == Job.objects.get(pk=job.pk).traceparent
    assert job.traceparent.split("-")[1] == format(request.get_span_context().trace_id, "032x")

    assert run_job(job).status == Status.DONE

    [attempt] = named(finished_spans(), "durajobs.run traced_steps")
    assert attempt.context.trace_id == request.get_span_context().trace_id
    assert attempt.parent.span_id == request.get_span_context().span_id
    assert dict(attempt.attributes) == {
        "durajobs.job.id": job.pk,
        "durajobs.job.kind": "traced_steps",
        "durajobs.job.attempt": 1,
        "durajobs.job.queue": "default",
        "durajobs.phase": "run",
        "durajobs.outcome": "done",
    }
    steps = [span for span in finished_spans() if span.name.startswith("durajobs.step ")]
    assert [span.name for span in steps] == ["durajobs.step fetch", "durajobs.step store"]
    for span in steps:
        assert span.parent.span_id == attempt.context.span_id
        assert span.attributes["durajobs.job.id"] == job.pk
        assert span.attributes["durajobs.outcome"] == "done"
        assert attempt.start_time <= span.start_time <= span.end_time <= attempt.end_time


def test_a_failure_is_recorded_redacted_with_an_error_status():
    job, _ = enqueued_in_a_request("traced_steps", subject={"fail": True})

    assert run_job(job).status == Status.FAILED

    spans = finished_spans()
    [attempt] = named(spans, "durajobs.run traced_steps")
    [store] = named(spans, "durajobs.step store")
    assert attempt.attributes["durajobs.outcome"] == "failed"
    assert store.attributes["durajobs.outcome"] == "failed"
    for span in (attempt, store):
        assert span.status.status_code == StatusCode.ERROR
        [event] = span.events
        assert event.name == "exception"
        assert event.attributes["exception.type"] == "RuntimeError"
        assert "password=[REDACTED]" in event.attributes["exception.message"]
    assert SECRET not in json.dumps([json.loads(span.to_json()) for span in spans])


def test_a_retried_job_has_a_span_per_attempt_in_the_same_trace():
    job, request = enqueued_in_a_request("traced_flaky")

    with clock() as now:
        assert run_job(job).status == Status.QUEUED
        now.move(31)
        assert run_job(job).status == Status.DONE

    attempts = named(finished_spans(), "durajobs.run traced_flaky")
    assert [
        (span.attributes["durajobs.job.attempt"], span.attributes["durajobs.outcome"]) for span in attempts
    ] == [
        (1, "retry"),
        (2, "done"),
    ]
    assert {span.context.trace_id for span in attempts} == {request.get_span_context().trace_id}
    assert [span.status.status_code for span in attempts] == [StatusCode.ERROR, StatusCode.UNSET]


def test_an_async_job_has_the_same_spans():
    job, request = enqueued_in_a_request("traced_async")

    assert run_job(job).status == Status.DONE

    spans = finished_spans()
    [attempt] = named(spans, "durajobs.run traced_async")
    assert attempt.parent.span_id == request.get_span_context().span_id
    assert attempt.attributes["durajobs.outcome"] == "done"
    steps = [span for span in spans if span.name.startswith("durajobs.step ")]
    assert [span.name for span in steps] == ["durajobs.step first", "durajobs.step second"]
    assert {span.parent.span_id for span in steps} == {attempt.context.span_id}


def test_a_child_job_joins_the_trace_of_its_parent_attempt_that_enqueued_it():
    parent, request = enqueued_in_a_request("traced_parent")

    assert run_job(parent).status == Status.DONE

    spans = finished_spans()
    first_attempt = named(spans, "durajobs.run traced_parent")[0]
    [child] = named(spans, "durajobs.run traced_steps")
    assert child.parent.span_id == first_attempt.context.span_id
    assert child.context.trace_id == request.get_span_context().trace_id
    assert [span.attributes["durajobs.outcome"] for span in named(spans, "durajobs.run traced_parent")] == [
        "waiting",
        "done",
    ]


def test_a_job_enqueued_outside_any_span_starts_a_trace_of_its_own():
    [(job, _)] = enqueue_many("traced_steps", [{"subject": {}}])
    assert job.traceparent is None

    run_job(job)

    [attempt] = named(finished_spans(), "durajobs.run traced_steps")
    assert attempt.parent is None


def test_many_jobs_enqueued_in_one_request_all_join_it():
    with trace.get_tracer("tests").start_as_current_span("import") as request:
        jobs = [job for job, _ in enqueue_many("traced_steps", [{"subject": {"n": n}} for n in range(3)])]

    for job in jobs:
        run_job(job)

    attempts = named(finished_spans(), "durajobs.run traced_steps")
    assert len(attempts) == 3
    assert {span.parent.span_id for span in attempts} == {request.get_span_context().span_id}


def run_worker(mode: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tests.child_run_telemetry", mode, "runjobs", "--burst"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_a_runjobs_worker_exports_spans_in_the_request_trace(child_env, tmp_path):
    job, request = enqueued_in_a_request("traced_steps")
    exported_to = tmp_path / "spans.jsonl"

    worker = run_worker(f"export={exported_to}", child_env)

    assert worker.returncode == 0, worker.stderr
    assert Job.objects.get(pk=job.pk).status == Status.DONE
    spans = [json.loads(line) for line in exported_to.read_text().splitlines()]
    by_name = {span["name"]: span for span in spans}
    attempt = by_name["durajobs.run traced_steps"]
    assert attempt["context"]["trace_id"] == "0x" + format(request.get_span_context().trace_id, "032x")
    assert attempt["parent_id"] == "0x" + format(request.get_span_context().span_id, "016x")
    assert attempt["attributes"]["durajobs.job.id"] == job.pk
    for step in ("fetch", "store"):
        assert by_name[f"durajobs.step {step}"]["parent_id"] == attempt["context"]["span_id"]


@pytest.mark.slow
def test_without_opentelemetry_a_worker_runs_jobs_and_stores_no_trace_context(child_env):
    job, _ = enqueued_in_a_request("traced_steps")
    probe = subprocess.run(
        [sys.executable, "-m", "tests.child_run_telemetry", "without", "shell", "-c",
         "from django_durajobs import telemetry; print(telemetry.ENABLED, telemetry.traceparent())"],
        env=child_env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert probe.stdout.splitlines()[-1] == "False None", probe.stderr

    worker = run_worker("without", child_env)

    assert worker.returncode == 0, worker.stderr
    assert Job.objects.get(pk=job.pk).status == Status.DONE
