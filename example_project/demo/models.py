"""What the demo's jobs work on: a hosted site, a small shop, a server fleet, backups, and the
simulated outside world (DNS propagation, a flaky partner API)."""

from django.db import models
from django.utils import timezone

# Hosting ---------------------------------------------------------------------------------------


class Site(models.Model):
    domain = models.CharField(max_length=255, unique=True)
    live_release = models.ForeignKey(
        "Release",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The release the site's traffic goes to.",
    )

    class Meta:
        ordering = ["domain"]

    def __str__(self) -> str:
        return self.domain


class Release(models.Model):
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="releases")
    version = models.CharField(max_length=50)
    artifact = models.CharField(max_length=255, help_text="The uploaded build, under DEMO_FILES_DIR.")
    sha256 = models.CharField(max_length=64)
    replaced = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The release that was live before this one went live; reverting the deploy "
        "switches back to it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["site", "-created_at"]
        constraints = [models.UniqueConstraint(fields=["site", "version"], name="demo_release_version")]

    def __str__(self) -> str:
        return f"{self.site} {self.version}"


class DnsRecord(models.Model):
    """A DNS record that resolvers see only once its change has propagated."""

    name = models.CharField(max_length=255, unique=True)
    target = models.CharField(max_length=255)
    changed_at = models.DateTimeField(default=timezone.now)
    visible_at = models.DateTimeField(help_text="When resolvers start answering with the new target.")

    class Meta:
        verbose_name = "DNS record"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} → {self.target}"

    def is_visible(self) -> bool:
        return self.visible_at <= timezone.now()


# Shop ------------------------------------------------------------------------------------------


class Product(models.Model):
    sku = models.CharField("SKU", max_length=50, unique=True)
    name = models.CharField(max_length=255)
    price = models.DecimalField(max_digits=10, decimal_places=2)
    stock = models.PositiveIntegerField()

    class Meta:
        ordering = ["sku"]

    def __str__(self) -> str:
        return self.name


class Order(models.Model):
    number = models.CharField(max_length=20, unique=True)
    customer_email = models.EmailField()
    product = models.ForeignKey(Product, on_delete=models.PROTECT, related_name="orders")
    quantity = models.PositiveIntegerField(default=1)
    total = models.DecimalField(max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(default=timezone.now)
    stock_reserved_at = models.DateTimeField(null=True, blank=True)
    paid_at = models.DateTimeField(null=True, blank=True)
    shipped_at = models.DateTimeField(null=True, blank=True)
    tracking_number = models.CharField(max_length=50, blank=True)
    refunded_at = models.DateTimeField(null=True, blank=True)
    refund_reference = models.CharField(max_length=50, blank=True)

    class Meta:
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"Order {self.number}"

    @property
    def state(self) -> str:
        """The furthest point the order has reached, for lists and messages."""
        for moment, name in (
            (self.refunded_at, "refunded"),
            (self.shipped_at, "shipped"),
            (self.paid_at, "paid"),
            (self.stock_reserved_at, "stock reserved"),
        ):
            if moment:
                return name
        return "new"


# Servers ---------------------------------------------------------------------------------------


class Server(models.Model):
    name = models.CharField(max_length=100, unique=True)
    broken_reason = models.CharField(
        max_length=255,
        blank=True,
        help_text="Why updates fail on this server; empty when it is healthy. Clear it to repair the server.",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class InstalledModule(models.Model):
    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="modules")
    name = models.CharField(max_length=100)
    version = models.CharField(max_length=50)
    installed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["server", "name"]
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="demo_module_per_server")]

    def __str__(self) -> str:
        return f"{self.name} {self.version} on {self.server}"


# Backups ---------------------------------------------------------------------------------------


class Backup(models.Model):
    class Purpose(models.TextChoices):
        MANUAL = "manual", "Manual backup"
        SAFETY = "safety", "Safety copy taken before a restore"

    file = models.CharField(max_length=255, unique=True, help_text="The gzipped JSON, under DEMO_FILES_DIR.")
    purpose = models.CharField(max_length=20, choices=Purpose.choices, default=Purpose.MANUAL)
    size_bytes = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    rows = models.PositiveIntegerField(help_text="Products and orders in the backup.")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        purpose = self.get_purpose_display().lower()
        return f"Backup {self.pk} ({purpose}, {self.created_at:%Y-%m-%d %H:%M:%S} UTC)"


# The simulated outside world -------------------------------------------------------------------


class PartnerApi(models.Model):
    """A partner's HTTP API as the demo simulates it: it counts calls and fails the first ones."""

    name = models.CharField(max_length=100, unique=True)
    calls = models.PositiveIntegerField(default=0)
    failures_before_success = models.PositiveIntegerField(
        default=2, help_text="How many calls answer 503 Service Unavailable before one succeeds."
    )

    class Meta:
        verbose_name = "partner API"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ExchangeRate(models.Model):
    currency = models.CharField(max_length=3, unique=True)
    per_euro = models.DecimalField(max_digits=12, decimal_places=6)
    fetched_at = models.DateTimeField()

    class Meta:
        ordering = ["currency"]

    def __str__(self) -> str:
        return f"1 EUR = {self.per_euro} {self.currency}"
