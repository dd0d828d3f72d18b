"""The metrics' counters of finished jobs, kept in the database so pruning never lowers them.

``store.metrics`` advances them on each scrape from the jobs that ended since ``TallyMark``.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class FinishedTally(models.Model):
    """Finished jobs of one kind and outcome: how many, their total run time, and their count per
    duration bucket (``store.metrics.DURATION_BUCKETS``, not cumulative)."""

    kind = models.CharField(_("kind"), max_length=100)
    outcome = models.CharField(_("outcome"), max_length=32)
    count = models.BigIntegerField(_("count"), default=0)
    seconds = models.FloatField(_("seconds"), default=0.0)
    #: Space-separated counts (a JSON column would cost a query in the system checks on SQLite).
    buckets = models.TextField(_("buckets"), default="")

    class Meta:
        app_label = "django_durajobs"
        verbose_name = _("finished jobs tally")
        constraints = [models.UniqueConstraint(fields=["kind", "outcome"], name="durajobs_tally_unique")]


class TallyMark(models.Model):
    """Up to where the tallies counted: the last ended job counted, by its end and id (one row)."""

    ended_at = models.DateTimeField(_("ended"))
    job_id = models.BigIntegerField(_("job id"), default=0)

    class Meta:
        app_label = "django_durajobs"
        verbose_name = _("tally mark")
