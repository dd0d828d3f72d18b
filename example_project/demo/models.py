"""What the demo's jobs work on: a hosted site, a small shop, a server fleet, backups, and the
simulated outside world (DNS propagation, a flaky partner API)."""

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext, pgettext
from django.utils.translation import gettext_lazy as _

# Hosting ---------------------------------------------------------------------------------------


class Site(models.Model):
    domain = models.CharField(_("domain"), max_length=255, unique=True)
    live_release = models.ForeignKey(
        "Release",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("live release"),
        help_text=_("The release the site's traffic goes to."),
    )

    class Meta:
        verbose_name = _("site")
        verbose_name_plural = _("sites")
        ordering = ["domain"]

    def __str__(self) -> str:
        return self.domain


class Release(models.Model):
    site = models.ForeignKey(Site, on_delete=models.CASCADE, related_name="releases", verbose_name=_("site"))
    version = models.CharField(_("version"), max_length=50)
    artifact = models.CharField(
        _("artifact"), max_length=255, help_text=_("The uploaded build, under DEMO_FILES_DIR.")
    )
    sha256 = models.CharField(_("sha256"), max_length=64)
    replaced = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("replaced"),
        help_text=_(
            "The release that was live before this one went live; reverting the deploy switches back to it."
        ),
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("release")
        verbose_name_plural = _("releases")
        ordering = ["site", "-created_at"]
        constraints = [models.UniqueConstraint(fields=["site", "version"], name="demo_release_version")]

    def __str__(self) -> str:
        return f"{self.site} {self.version}"


class DnsRecord(models.Model):
    """A DNS record that resolvers see only once its change has propagated."""

    name = models.CharField(_("name"), max_length=255, unique=True)
    target = models.CharField(_("target"), max_length=255)
    changed_at = models.DateTimeField(_("changed at"), default=timezone.now)
    visible_at = models.DateTimeField(
        _("visible at"), help_text=_("When resolvers start answering with the new target.")
    )

    class Meta:
        verbose_name = _("DNS record")
        verbose_name_plural = _("DNS records")
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} → {self.target}"

    def is_visible(self) -> bool:
        return self.visible_at <= timezone.now()


# Shop ------------------------------------------------------------------------------------------


class Product(models.Model):
    sku = models.CharField(_("SKU"), max_length=50, unique=True)
    name = models.CharField(_("name"), max_length=255)
    price = models.DecimalField(_("price"), max_digits=10, decimal_places=2)
    stock = models.PositiveIntegerField(_("stock"))

    class Meta:
        verbose_name = _("product")
        verbose_name_plural = _("products")
        ordering = ["sku"]

    def __str__(self) -> str:
        return self.name


class Order(models.Model):
    number = models.CharField(_("number"), max_length=20, unique=True)
    customer_email = models.EmailField(_("customer email"))
    product = models.ForeignKey(
        Product, on_delete=models.PROTECT, related_name="orders", verbose_name=_("product")
    )
    quantity = models.PositiveIntegerField(_("quantity"), default=1)
    total = models.DecimalField(_("total"), max_digits=10, decimal_places=2)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    stock_reserved_at = models.DateTimeField(_("stock reserved at"), null=True, blank=True)
    paid_at = models.DateTimeField(_("paid at"), null=True, blank=True)
    shipped_at = models.DateTimeField(_("shipped at"), null=True, blank=True)
    tracking_number = models.CharField(_("tracking number"), max_length=50, blank=True)
    refunded_at = models.DateTimeField(_("refunded at"), null=True, blank=True)
    refund_reference = models.CharField(_("refund reference"), max_length=50, blank=True)

    class Meta:
        verbose_name = _("order")
        verbose_name_plural = _("orders")
        ordering = ["-number"]

    def __str__(self) -> str:
        return gettext("Order %(number)s") % {"number": self.number}

    @property
    def state(self) -> str:
        """The furthest point the order has reached, for lists and messages."""
        for moment, name in (
            (self.refunded_at, pgettext("order state", "refunded")),
            (self.shipped_at, pgettext("order state", "shipped")),
            (self.paid_at, pgettext("order state", "paid")),
            (self.stock_reserved_at, pgettext("order state", "stock reserved")),
        ):
            if moment:
                return name
        return pgettext("order state", "new")


# Servers ---------------------------------------------------------------------------------------


class Server(models.Model):
    name = models.CharField(_("name"), max_length=100, unique=True)
    broken_reason = models.CharField(
        _("broken reason"),
        max_length=255,
        blank=True,
        help_text=_(
            "Why updates fail on this server; empty when it is healthy. Clear it to repair the server."
        ),
    )

    class Meta:
        verbose_name = _("server")
        verbose_name_plural = _("servers")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class InstalledModule(models.Model):
    server = models.ForeignKey(
        Server, on_delete=models.CASCADE, related_name="modules", verbose_name=_("server")
    )
    name = models.CharField(_("name"), max_length=100)
    version = models.CharField(_("version"), max_length=50)
    installed_at = models.DateTimeField(_("installed at"), default=timezone.now)

    class Meta:
        verbose_name = _("installed module")
        verbose_name_plural = _("installed modules")
        ordering = ["server", "name"]
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="demo_module_per_server")]

    def __str__(self) -> str:
        return gettext("%(module)s %(version)s on %(server)s") % {
            "module": self.name,
            "version": self.version,
            "server": self.server,
        }


# Backups ---------------------------------------------------------------------------------------


class Backup(models.Model):
    class Purpose(models.TextChoices):
        MANUAL = "manual", _("Manual backup")
        SAFETY = "safety", _("Safety copy taken before a restore")

    file = models.CharField(
        _("file"), max_length=255, unique=True, help_text=_("The gzipped JSON, under DEMO_FILES_DIR.")
    )
    purpose = models.CharField(_("purpose"), max_length=20, choices=Purpose.choices, default=Purpose.MANUAL)
    size_bytes = models.PositiveBigIntegerField(_("size bytes"))
    sha256 = models.CharField(_("sha256"), max_length=64)
    rows = models.PositiveIntegerField(_("rows"), help_text=_("Products and orders in the backup."))
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("backup")
        verbose_name_plural = _("backups")
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return gettext("Backup %(id)s (%(purpose)s, %(created_at)s UTC)") % {
            "id": self.pk,
            "purpose": self.get_purpose_display().lower(),
            "created_at": f"{self.created_at:%Y-%m-%d %H:%M:%S}",
        }


# The simulated outside world -------------------------------------------------------------------


class PartnerApi(models.Model):
    """A partner's HTTP API as the demo simulates it: it counts calls and fails the first ones."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    calls = models.PositiveIntegerField(_("calls"), default=0)
    failures_before_success = models.PositiveIntegerField(
        _("failures before success"),
        default=2,
        help_text=_("How many calls answer 503 Service Unavailable before one succeeds."),
    )

    class Meta:
        verbose_name = _("partner API")
        verbose_name_plural = _("partner APIs")
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ExchangeRate(models.Model):
    currency = models.CharField(_("currency"), max_length=3, unique=True)
    per_euro = models.DecimalField(_("per euro"), max_digits=12, decimal_places=6)
    fetched_at = models.DateTimeField(_("fetched at"))

    class Meta:
        verbose_name = _("exchange rate")
        verbose_name_plural = _("exchange rates")
        ordering = ["currency"]

    def __str__(self) -> str:
        return gettext("1 EUR = %(per_euro)s %(currency)s") % {
            "per_euro": self.per_euro,
            "currency": self.currency,
        }
