from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from example_project.demo.views import my_deploys, payment_callback

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="admin:index")),
    path("admin/", admin.site.urls),
    path("i18n/", include("django.conf.urls.i18n")),  # the language switch in the admin's header
    path("favicon.ico", RedirectView.as_view(url=static("demo/favicon.svg"))),
    path("payments/<str:number>/paid", payment_callback, name="payment-callback"),
    # A customer's own page and the end users' endpoints its job widgets talk to.
    path("my-deploys/", my_deploys, name="my-deploys"),
    path("jobs/", include("django_durajobs.urls")),
    path("login/", LoginView.as_view(template_name="demo/login.html"), name="login"),
]
