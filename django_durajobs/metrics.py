"""Prometheus metrics: ``path("metrics/", include("django_durajobs.metrics"))``.

A scrape needs ``Authorization: Bearer <DURAJOBS["METRICS_TOKEN"]>``, or a logged-in user with
``django_durajobs.view_job``. The figures come from ``store.metrics``; prometheus-client renders
them from a registry of this module's own, so the process's other metrics are not mixed in.
"""

from __future__ import annotations

import hmac
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .conf import get_setting
from .errors import install_command
from .store import metrics as figures

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
except ImportError:  # the prometheus extra is not installed
    PROMETHEUS = False
else:
    PROMETHEUS = True


class _Collector:
    """One scrape's figures as metric families."""

    def __init__(self, shot: figures.Snapshot) -> None:
        self.shot = shot

    def collect(self) -> Iterator[Any]:
        shot = self.shot
        jobs = GaugeMetricFamily(
            "durajobs_jobs", "Unfinished jobs by status, kind and queue.", labels=["status", "kind", "queue"]
        )
        for status, kind, queue, count in shot.jobs:
            jobs.add_metric([status, kind, queue], count)
        yield jobs
        lag = GaugeMetricFamily(
            "durajobs_queue_lag_seconds", "How long the oldest due queued job has waited.", labels=["queue"]
        )
        for queue, seconds in sorted(shot.lag.items()):
            lag.add_metric([queue], seconds)
        yield lag
        finished = CounterMetricFamily(
            "durajobs_jobs_finished", "Jobs that ended, by kind and outcome.", labels=["kind", "outcome"]
        )
        by_kind: dict[str, figures.Tally] = defaultdict(figures.Tally)
        for (kind, outcome), tally in sorted(shot.finished.items()):
            finished.add_metric([kind, outcome], tally.count)
            total = by_kind[kind]
            total.seconds += tally.seconds
            total.buckets = [a + b for a, b in zip(total.buckets, tally.buckets, strict=True)]
        yield finished
        durations = HistogramMetricFamily(
            "durajobs_job_duration_seconds",
            "From first start to end of the jobs that ended, by kind.",
            labels=["kind"],
        )
        bounds = [repr(bound) for bound in figures.DURATION_BUCKETS] + ["+Inf"]
        for kind, total in sorted(by_kind.items()):
            cumulative, running = [], 0
            for bound, count in zip(bounds, total.buckets, strict=True):
                running += count
                cumulative.append((bound, running))
            durations.add_metric([kind], cumulative, sum_value=total.seconds)
        yield durations


def _allowed(request: HttpRequest) -> HttpResponse | None:
    """None when the scrape may go on; otherwise the refusal (401, or 403 for a user without view_job)."""
    token = get_setting("METRICS_TOKEN")
    given = request.headers.get("Authorization", "")
    if token and given.startswith("Bearer "):
        if hmac.compare_digest(given.removeprefix("Bearer ").encode(), str(token).encode()):
            return None
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        if user.has_perm("django_durajobs.view_job"):
            return None
        return HttpResponse(_("Viewing jobs is not permitted."), status=403, content_type="text/plain")
    response = HttpResponse(_("A metrics token or a login is needed."), status=401, content_type="text/plain")
    response["WWW-Authenticate"] = 'Bearer realm="durajobs metrics"'
    return response


@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    refused = _allowed(request)
    if refused is not None:
        return refused
    if not PROMETHEUS:
        return HttpResponse(
            _("The metrics need prometheus-client, which is not installed. Install it with: %(command)s")
            % {"command": install_command("prometheus")},
            status=501,
            content_type="text/plain",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(figures.snapshot()))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


app_name = "durajobs_metrics"
urlpatterns = [path("", metrics_view, name="metrics")]
