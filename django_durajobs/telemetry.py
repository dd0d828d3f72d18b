"""OpenTelemetry spans for attempts and steps, when ``opentelemetry-api`` is installed.

Without it every function here is one flag check: the engine calls them unconditionally. Spans
are started and ended explicitly (not as the current span), because an async job's stages run
in different threads; the attempt's parent is the trace context its enqueue captured
(``Job.traceparent``), so a job's spans join the request that enqueued it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

from .redaction import describe_exception

try:
    from opentelemetry import trace
    from opentelemetry.trace import Status as SpanStatus
    from opentelemetry.trace import StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the otel extra is not installed: spans are a no-op
    ENABLED = False
else:
    ENABLED = True
    _propagator = TraceContextTextMapPropagator()
    #: A proxy until an SDK sets the provider, then that provider's tracer: looked up once.
    _tracer = trace.get_tracer("django_durajobs")


def traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, to be stored with a job being enqueued."""
    if not ENABLED:
        return None
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


def start_attempt(job: Any, reverting: bool) -> Any:
    """The span of one attempt (``durajobs.run <kind>``), a child of the enqueue's trace context."""
    if not ENABLED:
        return None
    parent = _propagator.extract({"traceparent": job.traceparent}) if job.traceparent else None
    return _tracer.start_span(
        f"durajobs.{'revert' if reverting else 'run'} {job.kind}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={
            "durajobs.job.id": job.pk,
            "durajobs.job.kind": job.kind,
            "durajobs.job.attempt": job.attempt,
            "durajobs.job.queue": job.queue,
            "durajobs.phase": "revert" if reverting else "run",
        },
    )


def start_step(attempt: Any, job: Any, step_id: str) -> Any:
    """The span of one step (``durajobs.step <step id>``), a child of its attempt's; none under an
    attempt nobody records (no SDK, or not sampled), whose children would not be recorded either."""
    if attempt is None or not attempt.is_recording():
        return None
    return _tracer.start_span(
        f"durajobs.step {step_id}",
        context=trace.set_span_in_context(attempt),
        attributes={"durajobs.job.id": job.pk, "durajobs.step.id": step_id},
    )


def raised(span: Any, exc: BaseException) -> None:
    """Record a failure on the span: its redacted text, never the exception's own (it may hold secrets)."""
    if span is None:
        return
    error = describe_exception(exc)
    span.add_event("exception", {"exception.type": type(exc).__qualname__, "exception.message": error})
    span.set_status(SpanStatus(StatusCode.ERROR, error))


def current(span: Any) -> AbstractContextManager[Any]:
    """Make ``span`` the current span for a block (an enqueue inside a run joins its trace)."""
    if span is None:
        return nullcontext()
    return trace.use_span(span, end_on_exit=False)


def end(span: Any, outcome: str) -> None:
    """End the span with its outcome (``durajobs.outcome``), once; a second end changes nothing."""
    if span is None or not span.is_recording():
        return
    span.set_attribute("durajobs.outcome", outcome)
    span.end()
