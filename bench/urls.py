"""The benchmark's URLs: the admin, for the job list it renders (``bench/scale_admin.py``)."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
