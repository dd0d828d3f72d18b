"""The shop's side of orders, refunds and exchange rates. Functions that write are meant for
``atomic=True`` steps: their writes and the step's checkpoint commit together, exactly once."""

from decimal import Decimal

from django.utils import timezone
from django.utils.translation import gettext as _

from django_durajobs import JobError

from .models import ExchangeRate, Order, Product


def _locked_order(number: str) -> Order:
    return Order.objects.select_for_update().get(number=number)


def reserve_stock(number: str) -> dict:
    order = _locked_order(number)
    product = Product.objects.select_for_update().get(pk=order.product_id)
    if product.stock < order.quantity:
        raise JobError(
            "out_of_stock",
            _("Order %(number)s needs %(quantity)s × %(product)s; %(stock)s in stock.")
            % {"number": number, "quantity": order.quantity, "product": product.name, "stock": product.stock},
        )
    product.stock -= order.quantity
    product.save(update_fields=["stock"])
    order.stock_reserved_at = timezone.now()
    order.save(update_fields=["stock_reserved_at"])
    return {"sku": product.sku, "quantity": order.quantity, "stock_left": product.stock}


def payment_event(number: str) -> str:
    """The name of the event an order's payment sends, and its ``process_order`` job waits for."""
    return f"payment:{number}"


def payment_of(number: str) -> dict | None:
    """The order's payment, or None while it is unpaid."""
    order = Order.objects.get(number=number)
    if order.paid_at is None:
        return None
    return {"paid_at": order.paid_at.isoformat(), "amount": str(order.total)}


def mark_shipped(number: str, tracking_number: str) -> dict:
    order = _locked_order(number)
    order.shipped_at = timezone.now()
    order.tracking_number = tracking_number
    order.save(update_fields=["shipped_at", "tracking_number"])
    return {"shipped_at": order.shipped_at.isoformat()}


def refundable_amount(number: str) -> Decimal:
    """What a refund of the order pays back; refuses an order that was not paid or was refunded."""
    order = Order.objects.get(number=number)
    if order.paid_at is None:
        raise JobError(
            "not_refundable",
            _("Order %(number)s was never paid; there is nothing to refund.") % {"number": number},
        )
    if order.refunded_at is not None:
        raise JobError(
            "not_refundable",
            _("Order %(number)s was refunded on %(date)s.")
            % {"number": number, "date": f"{order.refunded_at:%Y-%m-%d}"},
        )
    return order.total


def refund_question(number: str) -> str:
    order = Order.objects.get(number=number)
    return _("Refund %(amount)s EUR to %(email)s for order %(number)s?") % {
        "amount": refundable_amount(number),
        "email": order.customer_email,
        "number": number,
    }


def restock_refunded(number: str, refund_reference: str) -> dict:
    """Put the refunded goods back in stock and mark the order refunded."""
    order = _locked_order(number)
    product = Product.objects.select_for_update().get(pk=order.product_id)
    product.stock += order.quantity
    product.save(update_fields=["stock"])
    order.refunded_at = timezone.now()
    order.refund_reference = refund_reference
    order.save(update_fields=["refunded_at", "refund_reference"])
    return {"sku": product.sku, "stock": product.stock}


def store_exchange_rates(rates: dict[str, str]) -> dict:
    fetched_at = timezone.now()
    for currency, per_euro in rates.items():
        ExchangeRate.objects.update_or_create(
            currency=currency, defaults={"per_euro": Decimal(per_euro), "fetched_at": fetched_at}
        )
    return {"currencies": sorted(rates)}
