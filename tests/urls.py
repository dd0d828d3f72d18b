from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("async/", include("tests.async_views")),
    path("metrics/", include("django_durajobs.metrics")),
    path("jobs/", include("django_durajobs.urls")),
]
