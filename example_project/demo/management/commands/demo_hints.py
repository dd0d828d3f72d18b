"""``manage.py demo_hints``: what to try first in the demo, in the site's language, naming the jobs,
pages and buttons as the admin shows them (scripts/demo prints it)."""

import textwrap

from django.core.management.base import BaseCommand
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, pgettext

from django_durajobs import Job
from django_durajobs.admin.display import OPERATIONS
from django_durajobs.admin.pages import PAGE_OPERATIONS
from example_project.demo.admin import OrderAdmin
from example_project.demo.models import Order, Server

#: How wide the hints are wrapped.
WIDTH = 100


def seeded_label(kind: str) -> str:
    """The label of the seeded job of ``kind`` (the first one), as the job list shows it."""
    job = Job.objects.filter(kind=kind, parent=None).order_by("pk").first()
    return job.label if job else kind


def place(model) -> str:
    """Where a model's list is in the admin: "Demo › Orders"."""
    return f"{model._meta.app_config.verbose_name} › {model._meta.verbose_name_plural.capitalize()}"


class Command(BaseCommand):
    help = gettext_lazy("Print what to try first in the demo, in the site's language.")

    def add_arguments(self, parser):
        parser.add_argument(
            "--url", default="http://127.0.0.1:8000", help=gettext_lazy("The demo's address.")
        )
        parser.add_argument("--login", default="", help=gettext_lazy("The admin login to print."))
        parser.add_argument("--secret", default="", help=gettext_lazy("The payment callback's secret."))

    def handle(self, *args, url, login, secret, **options):
        revert = OPERATIONS["revert"].label
        jobs = f"{Job._meta.app_config.verbose_name} › {Job._meta.verbose_name_plural.capitalize()}"
        curl = f"curl -X POST -H 'X-Demo-Signature: {secret}' {url}/payments/1002/paid"
        hints = [
            _("“%(job)s” needs a decision: open it and click “%(approve)s” (or “%(decline)s”).")
            % {"job": seeded_label("refund_order"), "approve": _("Approve refund"), "decline": _("Decline")},
            _(
                "“%(job)s” waits for its payment. Play the payment provider with the command below, or"
                " run the action “%(action)s” on order 1002 in %(orders)s; the job ships the order."
            )
            % {
                "job": seeded_label("process_order"),
                "action": OrderAdmin.mark_paid.short_description,
                "orders": place(Order),
            },
            _(
                "“%(job)s” fails: its family is partial, as web-4 and web-6 are broken. Repair them in"
                " %(servers)s (clear “%(field)s”), click “%(retry_children)s” on its page, then “%(retry)s”."
            )
            % {
                "job": seeded_label("update_module"),
                "servers": place(Server),
                "field": Server._meta.get_field("broken_reason").verbose_name,
                "retry_children": PAGE_OPERATIONS["retry_children"].label,
                "retry": OPERATIONS["retry"].label,
            },
            _(
                "“%(job)s” fails four times and is retried 5, 10, 20 and 40 s later: watch its tries,"
                " error and next run count down, until the fifth try succeeds after a minute or so."
            )
            % {"job": seeded_label("flaky_call")},
            _(
                "“%(job)s” waits about two minutes for its DNS record, looking again every 5 s by itself"
                " (its page counts the checks); once it is done, click “%(revert)s” to send the traffic"
                " back to 1.0.0."
            )
            % {"job": seeded_label("deploy_site"), "revert": revert},
            _(
                "“%(job)s” asks before it replaces anything: click “%(restore)s”; then “%(revert)s” puts"
                " the data back from the safety copy it took."
            )
            % {
                "job": seeded_label("restore_database"),
                "restore": pgettext("action", "Restore"),
                "revert": revert,
            },
        ]
        lines = [
            "",
            "  " + _("The example project: %(url)s") % {"url": f"{url}/admin/"},
            "  " + _("Log in with %(login)s") % {"login": login},
            "",
            "  " + _("What to click first, in %(jobs)s:") % {"jobs": jobs},
            *(
                textwrap.fill(hint, WIDTH, initial_indent="  - ", subsequent_indent="    ")
                for hint in hints[:2]
            ),
            "      " + curl,
            *(
                textwrap.fill(hint, WIDTH, initial_indent="  - ", subsequent_indent="    ")
                for hint in hints[2:]
            ),
            "",
            "  "
            + _("The dashboard (counts, throughput, the workers): %(url)s")
            % {"url": f"{url}/admin/django_durajobs/job/dashboard/"},
            "  "
            + _(
                "scripts/demo --reset starts again from nothing. Ctrl-C stops the web server and the worker."
            ),
            "",
        ]
        self.stdout.write("\n".join(lines))
