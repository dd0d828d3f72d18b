"""The job table's queryset: jobs by state, as ``status.py`` names the states and their sets.

Its own module so that ``models.py`` holds the models alone.
"""

from __future__ import annotations

from django.db import models

from .family import OPEN
from .status import TERMINAL, WAITING, Status
from .transitions import HELD_STATUSES


class JobQuerySet(models.QuerySet):
    """Jobs by state, named as ``status.py`` names the states and their sets."""

    def queued(self) -> JobQuerySet:
        return self.filter(status=Status.QUEUED)

    def running(self) -> JobQuerySet:
        return self.filter(status=Status.RUNNING)

    def done(self) -> JobQuerySet:
        return self.filter(status=Status.DONE)

    def failed(self) -> JobQuerySet:
        return self.filter(status=Status.FAILED)

    def waiting(self) -> JobQuerySet:
        return self.filter(status__in=WAITING)

    def held(self) -> JobQuerySet:
        """In a status a worker holds a job in: running, or reverting (once its revert is claimed)."""
        return self.filter(status__in=HELD_STATUSES)

    def terminal(self) -> JobQuerySet:
        return self.filter(status__in=TERMINAL)

    def unfinished(self) -> JobQuerySet:
        return self.exclude(status__in=TERMINAL)

    def unsettled(self) -> JobQuerySet:
        """Not settled: as a child, still to be waited for (``family.OPEN``, named one by one so
        that ``durajobs_parent_status`` finds a parent's open children without its settled ones)."""
        return self.filter(status__in=OPEN)
