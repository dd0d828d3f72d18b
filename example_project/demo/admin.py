"""The demo's own data in the admin, next to the jobs working on it."""

from django.contrib import admin, messages
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from .models import (
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
from .payments import record_payment


class ReleaseInline(admin.TabularInline):
    model = Release
    fk_name = "site"
    fields = ["version", "artifact", "sha256", "replaced", "created_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Site)
class SiteAdmin(admin.ModelAdmin):
    list_display = ["domain", "live_release"]
    inlines = [ReleaseInline]


@admin.register(DnsRecord)
class DnsRecordAdmin(admin.ModelAdmin):
    list_display = ["name", "target", "changed_at", "visible_at", "visible"]

    @admin.display(boolean=True, description=_("visible to resolvers"))
    def visible(self, record):
        return record.is_visible()


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["sku", "name", "price", "stock"]


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["number", "customer_email", "product", "quantity", "total", "state", "tracking_number"]
    actions = ["mark_paid"]

    @admin.display(description=_("state"))
    def state(self, order):
        return order.state

    @admin.action(description=_("Mark paid (as the payment provider's callback would)"))
    def mark_paid(self, request, queryset):
        for order in queryset:
            _order, paid_now = record_payment(order.number, by=request.user)
            if paid_now:
                self.message_user(
                    request,
                    gettext("Order %(number)s is paid; its payment event is sent.")
                    % {"number": order.number},
                    messages.SUCCESS,
                )
            else:
                self.message_user(
                    request,
                    gettext("Order %(number)s was paid before.") % {"number": order.number},
                    messages.WARNING,
                )


class InstalledModuleInline(admin.TabularInline):
    model = InstalledModule
    fields = ["name", "version", "installed_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Server)
class ServerAdmin(admin.ModelAdmin):
    list_display = ["name", "broken_reason"]
    list_editable = ["broken_reason"]
    inlines = [InstalledModuleInline]


@admin.register(Backup)
class BackupAdmin(admin.ModelAdmin):
    list_display = ["id", "created_at", "purpose", "file", "rows", "size_bytes"]
    readonly_fields = ["file", "purpose", "size_bytes", "sha256", "rows", "created_at"]


@admin.register(PartnerApi)
class PartnerApiAdmin(admin.ModelAdmin):
    list_display = ["name", "calls", "failures_before_success"]


@admin.register(ExchangeRate)
class ExchangeRateAdmin(admin.ModelAdmin):
    list_display = ["currency", "per_euro", "fetched_at"]
