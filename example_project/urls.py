from django.contrib import admin
from django.urls import path
from django.views.generic import RedirectView

from example_project.demo.views import payment_callback

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="admin:index")),
    path("admin/", admin.site.urls),
    path("payments/<str:number>/paid", payment_callback, name="payment-callback"),
]
