"""``manage.py seed_demo``: the demo's data, and one job of each kind working on it."""

from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from example_project.demo import backups, sites
from example_project.demo.jobs import (
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
    InstalledModule,
    Order,
    PartnerApi,
    Product,
    Release,
    Server,
    Site,
)

DOMAIN = "shop.example.com"
SEED_BACKUP = "backups/seed.json"
BROKEN_SERVERS = {
    "web-4": "No space left on device: /var is 100% full",
    "web-6": "Read-only file system: /opt/modules was remounted read-only after disk errors",
}


class Command(BaseCommand):
    help = gettext_lazy(
        "Create the demo data and start one job of each kind. Running it again changes nothing."
    )

    def handle(self, *args, **options):
        with transaction.atomic():
            self.create_site()
            self.create_shop()
            self.create_servers()
            PartnerApi.objects.get_or_create(name="exchange-rates", defaults={"failures_before_success": 4})
        seed_backup = self.create_backup()
        for job, created in self.start_jobs(seed_backup):
            if created:
                line = _("Started: job %(job)s, %(label)s")
            else:
                line = _("Already started: job %(job)s, %(label)s")
            self.stdout.write(line % {"job": job.pk, "label": job.label})

    def create_site(self):
        site, created = Site.objects.get_or_create(domain=DOMAIN)
        if created:  # live on release 1.0.0, built and uploaded as a deploy would
            built = sites.build(DOMAIN, "1.0.0")
            uploaded = sites.upload(DOMAIN, "1.0.0", built)
            site.live_release = Release.objects.create(
                site=site, version="1.0.0", artifact=uploaded["path"], sha256=uploaded["sha256"]
            )
            site.save(update_fields=["live_release"])
        # The site moves to new servers: its DNS record was just changed and propagates.
        now = timezone.now()
        DnsRecord.objects.get_or_create(
            name=DOMAIN,
            defaults={
                "target": "203.0.113.20",
                "changed_at": now,
                "visible_at": now + timedelta(seconds=settings.DEMO_DNS_PROPAGATION_SECONDS),
            },
        )

    def create_shop(self):
        beans, _ = Product.objects.get_or_create(
            sku="BEANS-1KG", defaults={"name": "Espresso beans, 1 kg", "price": Decimal("24.50"), "stock": 40}
        )
        grinder, _ = Product.objects.get_or_create(
            sku="GRINDER-C2", defaults={"name": "Hand grinder", "price": Decimal("49.00"), "stock": 11}
        )
        Product.objects.get_or_create(
            sku="KETTLE-GN", defaults={"name": "Gooseneck kettle", "price": Decimal("65.00"), "stock": 7}
        )
        three_days_ago = timezone.now() - timedelta(days=3)
        # Shipped last week and now to be refunded (refund_order).
        Order.objects.get_or_create(
            number="1001",
            defaults={
                "customer_email": "ana@example.com",
                "product": grinder,
                "total": grinder.price,
                "created_at": three_days_ago,
                "stock_reserved_at": three_days_ago,
                "paid_at": three_days_ago,
                "shipped_at": three_days_ago + timedelta(hours=5),
                "tracking_number": "1ZDEMO0001",
            },
        )
        # Just placed, not paid yet (process_order).
        Order.objects.get_or_create(
            number="1002",
            defaults={
                "customer_email": "ben@example.com",
                "product": beans,
                "quantity": 2,
                "total": 2 * beans.price,
            },
        )

    def create_servers(self):
        for number in range(1, 7):
            name = f"web-{number}"
            server, _ = Server.objects.get_or_create(
                name=name, defaults={"broken_reason": BROKEN_SERVERS.get(name, "")}
            )
            InstalledModule.objects.get_or_create(
                server=server, name="payments", defaults={"version": "2.3.0"}
            )

    def create_backup(self):
        """A backup of the freshly seeded shop, for the restore job to restore."""
        backup = Backup.objects.filter(file=f"{SEED_BACKUP}.gz").first()
        if backup is None:
            backup = Backup.objects.get(pk=backups.record(backups.write(SEED_BACKUP), Backup.Purpose.MANUAL))
        return backup

    def start_jobs(self, seed_backup):
        """One job of each kind; the idempotency keys make a second run find them instead."""
        seeded = {"actor_type": "system"}
        yield deploy_site.enqueue(
            subject={"domain": DOMAIN, "version": "1.1.0"},
            subject_type="demo.site",
            subject_id=DOMAIN,
            label=_("Deploy %(domain)s %(version)s") % {"domain": DOMAIN, "version": "1.1.0"},
            idempotency_key=f"deploy-{DOMAIN}-1.1.0",
            **seeded,
        )
        yield start_order_processing("1002", **seeded)
        yield start_refund("1001", **seeded)
        yield backup_database.enqueue(
            label=_("Back up the shop database"), idempotency_key="seed-backup", **seeded
        )
        yield restore_database.enqueue(
            subject={"backup_id": seed_backup.pk},
            label=_("Restore the shop database from backup %(backup)s") % {"backup": seed_backup.pk},
            idempotency_key=f"seed-restore-{seed_backup.pk}",
            **seeded,
        )
        yield update_module.enqueue(
            subject={"module": "payments", "version": "2.4.0"},
            label=_("Update %(module)s to %(version)s on every server")
            % {"module": "payments", "version": "2.4.0"},
            idempotency_key="update-payments-2.4.0",
            **seeded,
        )
        yield flaky_call.enqueue(
            subject={"api": "exchange-rates"},
            label=_("Fetch exchange rates"),
            idempotency_key="seed-fetch-exchange-rates",
            **seeded,
        )
