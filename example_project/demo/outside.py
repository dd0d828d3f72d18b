"""The other systems the demo's jobs talk to, simulated: a courier, a payment provider and a
partner API. Each call takes DEMO_STEP_SECONDS (0 in tests), as a real one takes time, so a
person watching the admin sees every step run."""

import hashlib
import time

from django.conf import settings
from django.db.models import F

from .models import PartnerApi


def take_time() -> None:
    """The latency of real work elsewhere: a compiler, an upload, an HTTP call."""
    time.sleep(settings.DEMO_STEP_SECONDS)


def book_courier(order_number: str) -> str:
    """Book a parcel pickup and return its tracking number.

    The order number is our reference with the courier, so booking again after a crash returns
    the same parcel instead of a second one: the step is safe to repeat.
    """
    take_time()
    return "1Z" + hashlib.sha256(order_number.encode()).hexdigest()[:12].upper()


def refund_payment(order_number: str, amount: str) -> str:
    """Ask the payment provider to pay ``amount`` back; returns its refund reference (again
    keyed by the order, so a repeated request refunds once)."""
    take_time()
    return f"RF-{order_number}-{amount}"


class PartnerApiUnavailable(Exception):
    """The partner answered 503: a temporary condition, worth trying again later.

    ``retryable = True`` is what django-durajobs looks for; for exceptions of other libraries,
    give the kind a ``retryable=`` predicate instead.
    """

    retryable = True


EXCHANGE_RATES = {"CHF": "0.9612", "GBP": "0.8547", "JPY": "168.2100", "USD": "1.0843"}


def fetch_exchange_rates(api_name: str) -> dict[str, str]:
    """Call the partner's exchange-rate endpoint: 503 for the first calls, then the rates."""
    take_time()
    PartnerApi.objects.filter(name=api_name).update(calls=F("calls") + 1)
    api = PartnerApi.objects.get(name=api_name)
    if api.calls <= api.failures_before_success:
        raise PartnerApiUnavailable(
            f"{api_name}: 503 Service Unavailable (call {api.calls}; the partner is overloaded)"
        )
    return dict(EXCHANGE_RATES)
