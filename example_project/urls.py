from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from example_project.demo.views import payment_callback

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="admin:index")),
    path("admin/", admin.site.urls),
    path("i18n/", include("django.conf.urls.i18n")),  # the language switch in the admin's header
    path("favicon.ico", RedirectView.as_view(url=static("demo/favicon.svg"))),
    path("payments/<str:number>/paid", payment_callback, name="payment-callback"),
]
