"""A payment arriving: record it on the order and send the event its order's job waits for."""

from django.db import transaction
from django.utils import timezone

from django_durajobs import send_event

from . import shop
from .models import Order


def record_payment(number: str, by) -> tuple[Order, bool]:
    """Mark the order paid and send its payment event; returns the order and whether this call
    paid it (providers deliver callbacks more than once: a repeat changes nothing).

    The event goes with the order's change: both commit together, or neither. A job waiting for
    the payment wakes at once; one that starts waiting later gets the payment as it asks.
    """
    with transaction.atomic():
        order = Order.objects.select_for_update().get(number=number)
        if order.paid_at is not None:
            return order, False
        order.paid_at = timezone.now()
        order.save(update_fields=["paid_at"])
        send_event(shop.payment_event(number), shop.payment_of(number), by=by)
    return order, True
