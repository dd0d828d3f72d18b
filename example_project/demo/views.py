"""The payment provider's callback, simulated (``POST /payments/<order number>/paid``), and a
customer's "my deploys" page (``/my-deploys/``)."""

import hmac

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from django_durajobs import Job

from .jobs import deploy_site
from .models import Order, Site
from .payments import record_payment

#: The latest jobs the "my deploys" page shows.
MY_JOBS_SHOWN = 10


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


class DeployForm(forms.Form):
    """A deploy a customer starts: one of the sites, a release number."""

    site = forms.ModelChoiceField(Site.objects.order_by("domain"), label=_("Site"), to_field_name="domain")
    version = forms.RegexField(r"^\d+(\.\d+){0,3}$", max_length=20, label=_("Release"))


@login_required(login_url="login")  # the customers' sign-in page (staff sign in at /admin/)
def my_deploys(request):
    """A customer's own page (no admin, no staff): start a deploy, and watch the jobs they started,
    each with the job widget (``{% job_widget %}``), live."""
    form = DeployForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        deploy_site.enqueue(
            subject={"domain": form.cleaned_data["site"].domain, "version": form.cleaned_data["version"]},
            created_by=request.user,
        )
        return redirect("my-deploys")
    jobs = Job.objects.filter(created_by=request.user).order_by("-created_at", "-id")[:MY_JOBS_SHOWN]
    return render(request, "demo/my_deploys.html", {"form": form, "jobs": jobs})
