"""The management commands' help is a lazy translation: ``--help`` prints it, in the active
language, instead of failing inside argparse (which takes only ``str``)."""

from __future__ import annotations

import pytest
from django.core.management import load_command_class


@pytest.mark.parametrize(
    ("name", "opening"),
    [
        ("jobs", "List, show, watch and operate durable jobs."),
        ("runjobs", "Run durable jobs: claim due jobs"),
        ("prunejobs", "Delete jobs that ended more than --older-than ago"),
    ],
)
def test_help_is_printed(name, opening):
    command = load_command_class("django_durajobs", name)
    shown = command.create_parser("manage.py", name).format_help()
    assert opening in " ".join(shown.split())
