"""``job_changed``: sent after commit on every state change (by ``store.announcing``)."""

from __future__ import annotations

from django.dispatch import Signal

#: Sent with ``sender=Job, job=<Job>, previous_status=<str | None>, status=<str>``.
job_changed = Signal()
