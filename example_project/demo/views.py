"""The payment provider's callback, simulated: ``POST /payments/<order number>/paid``."""

import hmac

from django.conf import settings
from django.http import JsonResponse
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .models import Order
from .payments import record_payment


@csrf_exempt  # called by another system, not from a form: it proves itself with the signature header
@require_POST
def payment_callback(request, number):
    """Mark the order paid and send its payment event, which wakes its job waiting for it.

    Real providers sign the request body with an HMAC; the demo checks a shared secret,
    ``X-Demo-Signature: <DEMO_PAYMENT_SECRET>``, compared in constant time all the same.
    """
    signature = request.headers.get("X-Demo-Signature", "")
    if not hmac.compare_digest(signature.encode(), settings.DEMO_PAYMENT_SECRET.encode()):
        return JsonResponse({"error": _("The X-Demo-Signature header is missing or wrong.")}, status=403)
    if not Order.objects.filter(number=number).exists():
        return JsonResponse({"error": _("There is no order %(number)s.") % {"number": number}}, status=404)
    order, first_delivery = record_payment(number, by="payment provider")
    return JsonResponse(
        {"order": order.number, "paid_at": order.paid_at.isoformat(), "first_delivery": first_delivery}
    )
