"""Fixtures for the tests against a real database."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """admin_client's superuser gets a password; hashing it with PBKDF2 would cost ~1 s per test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
