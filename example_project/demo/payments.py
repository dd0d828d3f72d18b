"""A payment arriving: record it on the order and wake the order's job that waits for it."""

from django.db import transaction
from django.utils import timezone

from django_durajobs import Job, JobError, Status, resume

from .jobs import ORDER_SUBJECT_TYPE, process_order
from .models import Order


def record_payment(number: str, by) -> tuple[Order, list[Job]]:
    """Mark the order paid (once: providers deliver callbacks more than once) and resume its
    ``process_order`` jobs that wait for the payment; returns the order and the resumed jobs."""
    with transaction.atomic():
        order = Order.objects.select_for_update().get(number=number)
        if order.paid_at is None:
            order.paid_at = timezone.now()
            order.save(update_fields=["paid_at"])
    waiting = Job.objects.filter(
        kind=process_order.name,
        subject_type=ORDER_SUBJECT_TYPE,
        subject_id=number,
        status=Status.AWAITING_PAYMENT,
    )
    resumed = []
    for job in waiting:
        try:
            resumed.append(resume(job, by=by))
        except JobError:
            pass  # it moved on meanwhile (its timed re-check woke it, or someone cancelled it)
    return order, resumed
