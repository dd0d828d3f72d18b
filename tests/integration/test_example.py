"""The example project (``example_project/demo``): each job kind reaches the end state a user of
the demo sees, and ``scripts/demo``'s non-interactive part sets up a fresh directory whose jobs
reach their expected states.

Jobs run through ``drain()``; a timed wait or a retry is made due by moving its ``next_run_at``
into the past, never by sleeping. The tests are transactional, as the demo runs: every step's
transaction commits, and a ``select_for_update`` outside an atomic step would fail here as it
would in production.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tarfile
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from django_durajobs import (
    Event,
    Job,
    JobLog,
    JobStep,
    children_summary,
    describe,
    drain,
    resume,
    retry,
    revert,
    store,
)
from django_durajobs.engine.runner import execute
from example_project.demo import backups
from example_project.demo.jobs import (
    DNS_RECHECK,
    backup_database,
    deploy_site,
    flaky_call,
    restore_database,
    start_order_processing,
    start_refund,
    update_module,
)
from example_project.demo.models import (
    Backup,
    DnsRecord,
    ExchangeRate,
    InstalledModule,
    Order,
    PartnerApi,
    Product,
    Release,
    Server,
    Site,
)
from example_project.demo.payments import record_payment
from tests.job_rows import fresh

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "test-payment-secret"  # tests/settings.py


@pytest.fixture(autouse=True)
def demo_files(settings, tmp_path):
    """Each test writes the demo's files (builds, webroots, backups) into its own directory."""
    settings.DEMO_FILES_DIR = tmp_path / "demo"
    settings.DEMO_STEP_SECONDS = 0
    return settings.DEMO_FILES_DIR


def make_due(job: Job) -> None:
    """Move a timed wait's or a retry's moment into the past, as time passing would."""
    Job.objects.filter(pk=job.pk).update(next_run_at=timezone.now() - timedelta(seconds=1))


# Deploy a site ---------------------------------------------------------------------------------


def live_site(domain="shop.example.com", dns_visible=True) -> Site:
    site = Site.objects.create(domain=domain)
    site.live_release = Release.objects.create(site=site, version="1.0.0", artifact="x", sha256="0" * 64)
    site.save()
    visible_at = timezone.now() + (timedelta(seconds=-1) if dns_visible else timedelta(hours=1))
    DnsRecord.objects.create(name=domain, target="203.0.113.20", visible_at=visible_at)
    return site


def deploy(version, domain="shop.example.com") -> Job:
    job, _ = deploy_site.enqueue(
        subject={"domain": domain, "version": version}, idempotency_key=f"{domain}-{version}"
    )
    return job


def test_deploy_builds_uploads_waits_for_dns_by_itself_then_switches_traffic(demo_files):
    site = live_site(dns_visible=False)
    job = deploy("1.1.0")

    before = timezone.now()
    drain()
    job = fresh(job)
    assert job.status == "awaiting_external"
    assert job.wait_reason == "DNS record for shop.example.com not visible yet"
    assert before + DNS_RECHECK <= job.next_run_at <= timezone.now() + DNS_RECHECK  # wakes by itself
    current = describe(job)["current_step"]
    assert (current["id"], current["state"]) == ("dns", "waiting")

    build = demo_files / "builds" / "shop.example.com-1.1.0.tar.gz"
    with tarfile.open(build) as tar:
        assert b"Release 1.1.0" in tar.extractfile("index.html").read()
    uploaded = demo_files / "webroot" / "shop.example.com" / "releases" / "1.1.0.tar.gz"
    assert uploaded.read_bytes() == build.read_bytes()
    assert Site.objects.get(pk=site.pk).live_release.version == "1.0.0"  # not switched yet

    assert drain() == 0  # the wait is not over: nothing runs early

    make_due(job)
    drain()
    assert fresh(job).status == "awaiting_external"  # looked again: still propagating

    DnsRecord.objects.update(visible_at=timezone.now() - timedelta(seconds=1))
    make_due(job)
    drain()
    job = fresh(job)
    assert job.status == "done"
    assert job.result == {"url": "https://shop.example.com/", "live": "1.1.0", "replaced": "1.0.0"}
    site.refresh_from_db()
    assert site.live_release.version == "1.1.0"
    assert site.live_release.replaced.version == "1.0.0"


def test_reverting_a_deploy_sends_traffic_back_to_the_previous_release():
    site = live_site()
    job = deploy("1.1.0")
    drain()
    assert fresh(job).status == "done"

    revert(job)
    drain()
    assert fresh(job).status == "reverted"
    site.refresh_from_db()
    assert site.live_release.version == "1.0.0"


def test_reverting_a_deploy_that_a_later_one_replaced_is_refused_and_changes_nothing():
    site = live_site()
    first, second = deploy("1.1.0"), deploy("1.2.0")
    drain()
    assert [fresh(first).status, fresh(second).status] == ["done", "done"]

    revert(first)
    drain()
    first = fresh(first)
    assert (first.status, first.error_code) == ("failed", "superseded")
    assert "now serves 1.2.0, not 1.1.0" in first.error
    site.refresh_from_db()
    assert site.live_release.version == "1.2.0"


# Process an order ------------------------------------------------------------------------------


def new_order(number="1002", stock=10, quantity=2, **fields) -> Order:
    product = Product.objects.create(
        sku=f"SKU-{number}", name="Espresso beans", price=Decimal("24.50"), stock=stock
    )
    return Order.objects.create(
        number=number,
        customer_email="ben@example.com",
        product=product,
        quantity=quantity,
        total=quantity * product.price,
        **fields,
    )


def pay(client, number, signature=SECRET):
    return client.post(f"/payments/{number}/paid", headers={"X-Demo-Signature": signature})


def test_an_order_reserves_stock_and_waits_for_its_payment():
    order = new_order(stock=10, quantity=2)
    job, _ = start_order_processing(order.number)
    drain()

    job = fresh(job)
    assert (job.status, job.waits_for_event) == ("awaiting_external", "payment:1002")
    assert job.wait_reason == "Waiting for event payment:1002"
    assert describe(job)["current_step"]["id"] == "payment"
    assert Product.objects.get(pk=order.product_id).stock == 8


@pytest.mark.urls("example_project.urls")
def test_the_payment_callback_marks_the_order_paid_and_the_job_ships_it(client):
    order = new_order(stock=10, quantity=2)
    job, _ = start_order_processing(order.number)
    drain()

    response = pay(client, order.number)
    assert response.status_code == 200
    body = response.json()
    assert (body["order"], body["first_delivery"]) == ("1002", True)
    assert fresh(job).status == "queued"  # woken by the event at once

    drain()
    job = fresh(job)
    assert job.status == "done"
    order.refresh_from_db()
    assert order.paid_at is not None and order.shipped_at is not None
    assert order.tracking_number == job.result["tracking_number"] != ""
    assert Product.objects.get(pk=order.product_id).stock == 8  # reserved once, across both runs
    payment = JobStep.objects.get(job_id=job.pk, step_id="payment").result
    assert payment == {"paid_at": order.paid_at.isoformat(), "amount": "49.00"}
    assert Event.objects.get(name="payment:1002").sent_by == "payment provider"

    paid_at = order.paid_at
    again = pay(client, order.number)  # providers deliver callbacks more than once
    assert again.status_code == 200 and again.json()["first_delivery"] is False
    order.refresh_from_db()
    assert order.paid_at == paid_at


@pytest.mark.urls("example_project.urls")
def test_a_payment_that_arrives_before_the_order_job_waits_is_not_lost(client):
    """The callback comes before the job reached its wait: the event is kept, and the job, when it
    gets there, finds the payment at once and ships the order in one run."""
    order = new_order(stock=10, quantity=2)
    job, _ = start_order_processing(order.number)

    assert pay(client, order.number).json()["first_delivery"] is True
    assert fresh(job).status == "queued"
    drain()

    job = fresh(job)
    assert job.status == "done"
    assert not any(
        "Waiting" in line for line in JobLog.objects.filter(job_id=job.pk).values_list("line", flat=True)
    )


def test_a_payment_recorded_in_a_transaction_that_rolls_back_sends_no_event():
    """The order's change and its event commit together: when the caller's transaction fails after
    the payment was recorded, the order is unpaid, no event exists and the job keeps waiting."""
    order = new_order()
    job, _ = start_order_processing(order.number)
    drain()

    with pytest.raises(RuntimeError), transaction.atomic():
        record_payment(order.number, by="payment provider")
        raise RuntimeError("the caller fails after recording the payment")

    assert not Event.objects.exists()
    assert Order.objects.get(pk=order.pk).paid_at is None
    drain()
    assert fresh(job).status == "awaiting_external"


@pytest.mark.urls("example_project.urls")
def test_a_payment_callback_with_a_wrong_signature_is_refused_and_changes_nothing(client):
    order = new_order()
    job, _ = start_order_processing(order.number)
    drain()
    updated_at = fresh(job).updated_at

    for signature in ("wrong", ""):
        response = pay(client, order.number, signature=signature)
        assert response.status_code == 403
        assert "X-Demo-Signature" in response.json()["error"]
    assert (
        client.get(f"/payments/{order.number}/paid", headers={"X-Demo-Signature": SECRET}).status_code == 405
    )
    assert pay(client, "9999").status_code == 404

    job = fresh(job)
    assert (job.status, job.updated_at) == ("awaiting_external", updated_at)
    assert not Event.objects.exists()
    assert Order.objects.get(pk=order.pk).paid_at is None


@pytest.mark.urls("example_project.urls")
def test_an_operator_marks_an_order_paid_in_the_admin_and_its_job_resumes(admin_client):
    order = new_order()
    job, _ = start_order_processing(order.number)
    drain()

    response = admin_client.post(
        reverse("admin:demo_order_changelist"),
        {"action": "mark_paid", "_selected_action": [order.pk]},
        follow=True,
    )
    assert "Order 1002 is paid; its payment event is sent." in response.content.decode()
    assert fresh(job).status == "queued"
    drain()
    assert fresh(job).status == "done"


def test_resuming_an_unpaid_order_only_makes_it_wait_again():
    order = new_order()
    job, _ = start_order_processing(order.number)
    drain()

    resume(job, by="impatient operator")
    drain()
    assert fresh(job).status == "awaiting_external"
    assert Product.objects.get(pk=order.product_id).stock == 8  # the reservation did not run again


def test_an_order_without_enough_stock_fails_clearly_and_reserves_nothing():
    order = new_order(stock=1, quantity=2)
    job, _ = start_order_processing(order.number)
    drain()

    job = fresh(job)
    assert (job.status, job.error_code) == ("failed", "out_of_stock")
    assert "Order 1002 needs 2 × Espresso beans; 1 in stock." in job.error
    assert Product.objects.get(pk=order.product_id).stock == 1


# Refund an order -------------------------------------------------------------------------------


def shipped_order() -> Order:
    order = new_order(number="1001", stock=5, quantity=1, paid_at=timezone.now(), shipped_at=timezone.now())
    Order.objects.filter(pk=order.pk).update(total=Decimal("49.00"), customer_email="ana@example.com")
    return order


def test_a_refund_asks_a_person_and_refunds_and_restocks_once_approved():
    order = shipped_order()
    job, _ = start_refund(order.number)
    drain()

    job = fresh(job)
    assert job.status == "needs_user"
    assert job.user_message == "Refund 49.00 EUR to ana@example.com for order 1001?"
    assert [(action["id"], action["label"]) for action in job.actions] == [
        ("approve", "Approve refund"),
        ("decline", "Decline"),
    ]
    assert Order.objects.get(pk=order.pk).refunded_at is None

    resume(job, by="manager", action="approve")
    drain()
    job = fresh(job)
    assert job.status == "done"
    assert job.result["refunded"] is True and job.result["amount"] == "49.00"
    order.refresh_from_db()
    assert order.refunded_at is not None and order.refund_reference == job.result["refund_reference"]
    assert Product.objects.get(pk=order.product_id).stock == 6


def test_a_declined_refund_ends_saying_so_and_changes_nothing():
    order = shipped_order()
    job, _ = start_refund(order.number)
    drain()

    resume(job, by="manager", action="decline")
    drain()
    job = fresh(job)
    assert job.status == "done"
    assert job.result == {"order": "1001", "refunded": False, "reason": "The refund was declined."}
    assert Order.objects.get(pk=order.pk).refunded_at is None
    assert Product.objects.get(pk=order.product_id).stock == 5


# Back up and restore ---------------------------------------------------------------------------


def test_a_backup_writes_a_gzipped_json_dump_and_records_its_size_and_checksum(demo_files):
    order = new_order()
    job, _ = backup_database.enqueue()
    drain()

    job = fresh(job)
    assert job.status == "done"
    backup = Backup.objects.get(pk=job.result["backup_id"])
    path = demo_files / backup.file
    assert (backup.purpose, backup.rows) == ("manual", 2)
    assert backup.size_bytes == path.stat().st_size
    assert backup.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    rows = json.loads(gzip.decompress(path.read_bytes()))
    assert {(row["model"], row["pk"]) for row in rows} == {
        ("demo.product", order.product_id),
        ("demo.order", order.pk),
    }
    assert not path.with_suffix("").exists()  # the uncompressed dump is removed


def test_a_restore_asks_first_takes_a_safety_copy_and_its_revert_puts_the_data_back():
    order = new_order(stock=10)
    backup_id = backups.record(backups.write("backups/before.json"), Backup.Purpose.MANUAL)
    Product.objects.update(stock=3)
    later = Order.objects.create(
        number="2000", customer_email="c@example.com", product=order.product, total=1
    )

    job, _ = restore_database.enqueue(subject={"backup_id": backup_id})
    drain()
    job = fresh(job)
    assert job.status == "needs_user"
    assert job.user_message.startswith(
        f"Replace every product and order with the 2 rows of Backup {backup_id} ("
    )
    assert [action["id"] for action in job.actions] == ["restore", "keep"]
    assert Product.objects.get().stock == 3  # nothing replaced before the answer

    resume(job, by="operator", action="restore")
    drain()
    job = fresh(job)
    assert job.status == "done"
    assert Product.objects.get().stock == 10
    assert not Order.objects.filter(pk=later.pk).exists()
    safety = Backup.objects.get(pk=job.result["safety_backup"])
    assert (safety.purpose, safety.rows) == ("safety", 3)

    revert(job)
    drain()
    assert fresh(job).status == "reverted"
    assert Product.objects.get().stock == 3
    assert Order.objects.filter(pk=later.pk, number="2000").exists()


def test_a_restore_answered_keep_changes_nothing_and_has_nothing_to_revert():
    new_order(stock=10)
    backup_id = backups.record(backups.write("backups/before.json"), Backup.Purpose.MANUAL)
    Product.objects.update(stock=3)

    job, _ = restore_database.enqueue(subject={"backup_id": backup_id})
    drain()
    resume(job, by="operator", action="keep")
    drain()
    job = fresh(job)
    assert (job.status, job.result) == ("done", {"restored": False, "reason": "The current data was kept."})
    assert Product.objects.get().stock == 3
    assert not Backup.objects.filter(purpose="safety").exists()

    revert(job)
    drain()
    assert fresh(job).status == "reverted"
    assert Product.objects.get().stock == 3


def test_a_restore_refuses_a_backup_whose_file_changed(demo_files):
    new_order(stock=10)
    backup_id = backups.record(backups.write("backups/before.json"), Backup.Purpose.MANUAL)
    (demo_files / "backups" / "before.json.gz").write_bytes(gzip.compress(b"[]"))
    Product.objects.update(stock=3)

    job, _ = restore_database.enqueue(subject={"backup_id": backup_id})
    drain()
    resume(job, by="operator", action="restore")
    drain()
    job = fresh(job)
    assert (job.status, job.error_code) == ("failed", "backup_corrupted")
    assert Product.objects.get().stock == 3


def test_a_backup_and_a_restore_of_the_shop_database_never_run_at_once():
    """They share the concurrency key ``database:shop``: while one runs the other stays queued,
    saying why, and starts once the first is over."""
    new_order(stock=10)
    backup_id = backups.record(backups.write("backups/before.json"), Backup.Purpose.MANUAL)
    backup, _ = backup_database.enqueue()
    lease = store.claim("demo-worker")
    assert lease.job.pk == backup.pk

    restore, _ = restore_database.enqueue(subject={"backup_id": backup_id})
    assert store.claim("demo-worker") is None
    assert describe(restore)["wait_reason"] == "Held back: 1 of 1 running with key database:shop"

    execute(lease)
    drain()
    assert fresh(backup).status == "done"
    assert fresh(restore).status == "needs_user"  # it ran, once the backup was over


# Update a module on every server ---------------------------------------------------------------


def servers(broken):
    for name in ("web-1", "web-2", "web-3", "web-4"):
        Server.objects.create(name=name, broken_reason=broken.get(name, ""))


def test_an_update_with_broken_servers_leaves_a_partial_family_and_fails_naming_them():
    servers({"web-3": "No space left on device"})
    parent, _ = update_module.enqueue(subject={"module": "payments", "version": "2.4.0"})
    drain()

    parent = fresh(parent)
    family = children_summary(parent)
    assert family["overall"] == "partial"
    assert family["by_status"] == {"done": 3, "failed": 1}
    assert (parent.status, parent.error_code) == ("failed", "partial_rollout")
    assert "payments 2.4.0 failed on 1 of 4 servers: web-3." in parent.error
    broken = next(child for child in family["children"] if child["subject"]["server"] == "web-3")
    assert "web-3: No space left on device" in broken["error"]
    updated = InstalledModule.objects.filter(name="payments", version="2.4.0")
    assert sorted(updated.values_list("server__name", flat=True)) == ["web-1", "web-2", "web-4"]


def test_an_update_ends_done_once_the_broken_servers_are_repaired_and_retried():
    servers({"web-3": "No space left on device"})
    parent, _ = update_module.enqueue(subject={"module": "payments", "version": "2.4.0"})
    drain()

    Server.objects.filter(name="web-3").update(broken_reason="")
    retry(Job.objects.get(parent=parent, status="failed"), by="operator")
    retry(parent, by="operator")
    drain()

    parent = fresh(parent)
    assert parent.status == "done"
    assert parent.result == {
        "module": "payments",
        "version": "2.4.0",
        "servers": ["web-1", "web-2", "web-3", "web-4"],
    }
    assert children_summary(parent)["overall"] == "done"
    assert InstalledModule.objects.filter(name="payments", version="2.4.0").count() == 4


# A flaky call ----------------------------------------------------------------------------------


def test_a_flaky_call_is_retried_with_growing_backoff_and_succeeds_on_the_third_try():
    PartnerApi.objects.create(name="exchange-rates", failures_before_success=2)
    job, _ = flaky_call.enqueue(subject={"api": "exchange-rates"})

    for attempt, backoff in ((1, 5), (2, 10)):  # backoff_base=5: 5 s, then 10 s
        before = timezone.now()
        drain()
        job = fresh(job)
        assert (job.status, job.attempt, job.error_code) == ("queued", attempt, "transient")
        assert "503 Service Unavailable" in job.error  # kept visible while the retry waits
        assert (
            before + timedelta(seconds=backoff)
            <= job.next_run_at
            <= timezone.now() + timedelta(seconds=backoff)
        )
        assert drain() == 0  # not before its time
        make_due(job)

    drain()
    job = fresh(job)
    assert (job.status, job.attempt, job.error) == ("done", 3, "")
    assert PartnerApi.objects.get().calls == 3
    assert set(ExchangeRate.objects.values_list("currency", flat=True)) == set(job.result["rates"])


# Seeding and the quick-start command -----------------------------------------------------------


def test_seed_demo_twice_creates_the_data_and_the_jobs_once():
    call_command("seed_demo", stdout=open(os.devnull, "w"))
    counts = {
        model.__name__: model.objects.count()
        for model in (Site, Release, DnsRecord, Product, Order, Server, Backup)
    }
    jobs = sorted(Job.objects.values_list("kind", flat=True))

    call_command("seed_demo", stdout=open(os.devnull, "w"))
    assert {
        model.__name__: model.objects.count()
        for model in (Site, Release, DnsRecord, Product, Order, Server, Backup)
    } == counts
    assert (
        sorted(Job.objects.values_list("kind", flat=True))
        == jobs
        == sorted(
            [
                "backup_database",
                "deploy_site",
                "flaky_call",
                "process_order",
                "refund_order",
                "restore_database",
                "update_module",
            ]
        )
    )
    assert Server.objects.exclude(broken_reason="").count() == 2


def test_demo_admin_creates_the_login_once_and_prints_the_same_password(capsys):
    call_command("demo_admin")
    first = capsys.readouterr().out.strip()
    call_command("demo_admin")
    assert capsys.readouterr().out.strip() == first
    password = first.removeprefix("username admin, password ")
    assert get_user_model().objects.get(username="admin").check_password(password)
