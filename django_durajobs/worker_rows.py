"""The ``runjobs`` processes, as each last said it was alive (``store.workers`` writes them)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class Worker(models.Model):
    """A ``runjobs`` process, as it last said it was alive: written at its start, at each of its
    heartbeats (one statement per interval, not per job) and when it stops.

    The jobs it runs now are those whose ``locked_by`` is its ``worker_id``.
    """

    worker_id = models.CharField(_("worker id"), max_length=255, unique=True)
    host = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("process id"))
    #: The queues it claims from; empty for all of them.
    queues = models.JSONField(_("queues"), default=list, blank=True)
    concurrency = models.PositiveSmallIntegerField(_("concurrency"))
    #: ``{kind: version}`` of the code it runs: which jobs it can run that wait for their version.
    kind_versions = models.JSONField(_("kind versions"), default=dict, blank=True)
    started_at = models.DateTimeField(_("started"))
    #: Its latest heartbeat, on the database's clock (as leases are judged).
    last_seen_at = models.DateTimeField(_("last heartbeat"))
    stopped_at = models.DateTimeField(_("stopped"), null=True, blank=True)
    #: Whether it hears new jobs at once (PostgreSQL's LISTEN), rather than polls for them.
    listens = models.BooleanField(_("listens"), default=False)

    class Meta:
        app_label = "django_durajobs"
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        indexes = [models.Index(fields=["last_seen_at"], name="durajobs_worker_seen")]

    def __str__(self) -> str:
        return self.worker_id
