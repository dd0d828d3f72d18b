"""The demo's job kinds, modelled on real operations. django-durajobs imports this module at
startup, as the admin imports ``admin.py``.

A run is re-entered after every wait, retry, crash and resume, so each kind follows three rules:

- every effect (a file written, another system called, a row changed) happens inside
  ``ctx.step``, which runs it once and replays its stored result afterwards;
- writes to this database go in ``atomic=True`` steps: the writes and the checkpoint commit
  together, so they happen exactly once; such steps stay short, as they hold a transaction;
- a step may wait (``ctx.wait_external``, ``ctx.needs_user``, ``ctx.wait_for_event``): it is
  marked waiting, and runs again — checking once more — when the job is resumed, its event is
  sent or its wait times out.

The functions doing the work live in ``sites``, ``shop``, ``backups``, ``servers`` and
``outside`` (the simulated other systems); the kinds below only put them in order.
"""

from datetime import timedelta

from django.utils.translation import gettext, pgettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from django_durajobs import job

from . import backups, outside, servers, shop, sites
from .models import Backup

#: DNS changes propagate in seconds to hours; a deploy looks again this often, by itself.
DNS_RECHECK = timedelta(seconds=5)


# Deploy a site ---------------------------------------------------------------------------------


@job(
    "deploy_site",
    title=_("Deploy a site"),
    steps=[
        ("build", _("Build")),
        ("upload", _("Upload to the webroot")),
        ("dns", _("Wait for DNS")),
        ("switch", _("Switch traffic")),
    ],
)
def deploy_site(job, ctx):
    domain, version = job.subject["domain"], job.subject["version"]
    built = ctx.step("build", lambda: sites.build(domain, version))
    ctx.progress(25)
    uploaded = ctx.step("upload", lambda: sites.upload(domain, version, built))
    ctx.progress(50)
    ctx.step("dns", lambda: wait_for_dns(ctx, domain))
    ctx.progress(75)
    switched = ctx.step("switch", lambda: sites.switch_traffic(domain, version, uploaded), atomic=True)
    return {"url": f"https://{domain}/", **switched}


def wait_for_dns(ctx, domain):
    """The record's target once resolvers see it. Until then the job waits and wakes by itself to
    look again: a timed wait, which nobody has to resume."""
    target = sites.dns_answer(domain)
    if target is None:
        ctx.wait_external(
            gettext("DNS record for %(domain)s not visible yet") % {"domain": domain}, resume_at=DNS_RECHECK
        )
    return {"target": target}


@deploy_site.revert
def undo_deploy(job, ctx):
    """Send the traffic back to the release this deploy replaced."""
    ctx.step(
        "switch_back", lambda: sites.switch_back(job.subject["domain"], job.subject["version"]), atomic=True
    )


# Process an order, refund one ------------------------------------------------------------------


@job(
    "process_order",
    title=_("Process an order"),
    steps=[
        ("reserve_stock", _("Reserve stock")),
        ("payment", _("Wait for payment")),
        ("book_courier", _("Book the courier")),
        ("ship", _("Mark shipped")),
    ],
)
def process_order(job, ctx):
    number = job.subject["order"]
    ctx.step("reserve_stock", lambda: shop.reserve_stock(number), atomic=True)
    ctx.step("payment", lambda: wait_for_payment(ctx, number))
    tracking_number = ctx.step("book_courier", lambda: outside.book_courier(number))
    ctx.step("ship", lambda: shop.mark_shipped(number, tracking_number), atomic=True)
    return {"order": number, "tracking_number": tracking_number}


#: Order jobs carry the order as their subject, so the admin and the payment callback find them.
ORDER_SUBJECT_TYPE = "demo.order"


def start_order_processing(number, **enqueue_options):
    """Enqueue the order's processing once: calling again returns the job already started."""
    return process_order.enqueue(
        subject={"order": number},
        subject_type=ORDER_SUBJECT_TYPE,
        subject_id=number,
        label=gettext("Process order %(number)s") % {"number": number},
        idempotency_key=f"process-order-{number}",
        **enqueue_options,
    )


def wait_for_payment(ctx, number):
    """The order's payment, as the event ``payment:<number>`` carries it; until it is sent, the
    job waits (``awaiting_external``, "Waiting for event payment:<number>").

    ``payments.record_payment`` — the provider's callback, or the admin's "Mark paid" — sends it.
    A payment that came before the job got here is returned at once: an event is kept once sent.
    """
    return ctx.wait_for_event(shop.payment_event(number))


def refund_actions() -> list[dict[str, str]]:
    """The choices of a refund's approval, in the language active when it is asked (they are stored)."""
    return [
        {
            "id": "approve",
            "label": gettext("Approve refund"),
            "description": gettext("Pay the money back and restock the goods."),
        },
        {"id": "decline", "label": gettext("Decline"), "description": gettext("Keep the order as it is.")},
    ]


@job(
    "refund_order",
    title=_("Refund an order"),
    steps=[
        ("approval", _("Approval")),
        ("refund_payment", _("Pay the money back")),
        ("restock", _("Restock and mark refunded")),
    ],
)
def refund_order(job, ctx):
    number = job.subject["order"]
    decision = ctx.step("approval", lambda: ask_for_approval(ctx, number))
    if decision["action"] == "decline":
        return {"order": number, "refunded": False, "reason": gettext("The refund was declined.")}
    reference = ctx.step("refund_payment", lambda: outside.refund_payment(number, decision["amount"]))
    ctx.step("restock", lambda: shop.restock_refunded(number, reference), atomic=True)
    return {"order": number, "refunded": True, "amount": decision["amount"], "refund_reference": reference}


def start_refund(number, **enqueue_options):
    """Enqueue the order's refund once; it waits for a person's approval before paying anything."""
    return refund_order.enqueue(
        subject={"order": number},
        subject_type=ORDER_SUBJECT_TYPE,
        subject_id=number,
        label=gettext("Refund order %(number)s") % {"number": number},
        idempotency_key=f"refund-order-{number}",
        **enqueue_options,
    )


def ask_for_approval(ctx, number):
    """A person's answer, checkpointed with the amount to refund; asks (and waits) until there is one."""
    amount = str(shop.refundable_amount(number))
    if ctx.resume_action not in ("approve", "decline"):
        ctx.needs_user(shop.refund_question(number), actions=refund_actions())
    return {"action": ctx.resume_action, "amount": amount}


# Back up and restore the shop database ---------------------------------------------------------


def database_key(subject):
    """Backups and restores of one database share this concurrency key (and the default limit of
    one): a restore never starts while a backup of that database runs, nor the other way round."""
    return f"database:{subject.get('database', 'shop')}"


@job(
    "backup_database",
    title=_("Back up the shop database"),
    steps=[
        ("dump", _("Dump the tables to JSON")),
        ("compress", _("Compress")),
        ("record", _("Record the backup")),
    ],
    concurrency_key=database_key,
)
def backup_database(job, ctx):
    dumped = ctx.step("dump", lambda: backups.dump(f"backups/backup-job{job.pk}.json"))
    written = ctx.step("compress", lambda: backups.compress(dumped))
    backup_id = ctx.step("record", lambda: backups.record(written, Backup.Purpose.MANUAL), atomic=True)
    return {"backup_id": backup_id, **written}


def restore_actions() -> list[dict[str, str]]:
    """The choices of a restore's confirmation, in the language active when it is asked (they are stored)."""
    return [
        {
            "id": "restore",
            "label": pgettext("action", "Restore"),
            "description": gettext("Take a safety copy, then replace the data."),
        },
        {"id": "keep", "label": gettext("Keep the current data")},
    ]


@job(
    "restore_database",
    title=_("Restore the shop database"),
    steps=[
        ("confirm", _("Confirm")),
        ("safety_copy", _("Back up the current state")),
        ("record_safety_copy", _("Record the safety copy")),
        ("verify", _("Verify the backup")),
        ("restore", pgettext_lazy("step", "Restore")),
    ],
    concurrency_key=database_key,
)
def restore_database(job, ctx):
    backup_id = job.subject["backup_id"]
    # A restore throws away everything that happened since the backup (orders paid, stock
    # reserved), so a person confirms it when it is time, rather than whenever a worker gets to it.
    if ctx.step("confirm", lambda: ask_to_restore(ctx, backup_id)) == "keep":
        return {"restored": False, "reason": gettext("The current data was kept.")}
    written = ctx.step("safety_copy", lambda: backups.write(f"backups/safety-before-job{job.pk}.json"))
    safety_id = ctx.step(
        "record_safety_copy", lambda: backups.record(written, Backup.Purpose.SAFETY), atomic=True
    )
    ctx.step("verify", lambda: backups.verify(backup_id))
    restored = ctx.step("restore", lambda: backups.restore(backup_id), atomic=True)
    return {"restored": True, "backup": backup_id, "safety_backup": safety_id, "rows": restored["rows"]}


def ask_to_restore(ctx, backup_id):
    if ctx.resume_action not in ("restore", "keep"):
        ctx.needs_user(backups.restore_question(backup_id), actions=restore_actions())
    return ctx.resume_action


@restore_database.revert
def undo_restore(job, ctx):
    """Put back the state from before the restore, from the safety copy the restore took."""
    if not (job.result or {}).get("restored"):
        # Kept, or not finished: the restore step is atomic, so the data was never replaced.
        ctx.log(gettext("The data was never replaced; there is nothing to put back."))
        return
    safety_id = job.result["safety_backup"]
    ctx.step("verify", lambda: backups.verify(safety_id))
    ctx.step("restore", lambda: backups.restore(safety_id), atomic=True)


# Update a module on every server ---------------------------------------------------------------


@job(
    "update_module",
    title=_("Update a module on every server"),
    steps=[("fan_out", _("Start one job per server")), ("verify", _("Check every server"))],
)
def update_module(job, ctx):
    module, version = job.subject["module"], job.subject["version"]
    ctx.step(
        "fan_out",
        lambda: [
            ctx.enqueue_child(
                "update_module_on_server",
                name,
                subject={"server": name, "module": module, "version": version},
                label=gettext("Update %(module)s to %(version)s on %(server)s")
                % {"module": module, "version": version, "server": name},
            ).pk
            for name in servers.names()
        ],
        atomic=True,
    )
    family = ctx.wait_for_children()
    # A rollout that left servers on the old version is not done: it ends failed, naming them,
    # so it shows among the failed jobs (and in whatever alerts on them) rather than reading as
    # a success with a footnote. Once those servers are repaired and their jobs retried, retrying
    # this job waits for them again and ends done.
    return ctx.step("verify", lambda: servers.verify_rollout(module, version, family))


@job(
    "update_module_on_server",
    title=_("Update a module on one server"),
    steps=[("copy_package", _("Copy the package")), ("install", _("Install"))],
)
def update_module_on_server(job, ctx):
    name, module, version = job.subject["server"], job.subject["module"], job.subject["version"]
    ctx.step("copy_package", lambda: servers.copy_package(name, module, version))
    return ctx.step("install", lambda: servers.install(name, module, version), atomic=True)


# A flaky call ----------------------------------------------------------------------------------


@job(
    "flaky_call",
    title=_("Fetch exchange rates from a flaky partner API"),
    steps=[("fetch", _("Call the partner API")), ("store", _("Store the rates"))],
    # outside.PartnerApiUnavailable says it is retryable; each failed try waits twice as long as
    # the one before: 5 s, 10 s, 20 s, 40 s. The demo's partner API fails four times: the fifth
    # try, over a minute after the first, succeeds.
    max_attempts=5,
    backoff_base=5,
)
def flaky_call(job, ctx):
    rates = ctx.step("fetch", lambda: outside.fetch_exchange_rates(job.subject["api"]))
    ctx.step("store", lambda: shop.store_exchange_rates(rates), atomic=True)
    return {"rates": rates}
