"""``manage.py prunejobs``: delete jobs that ended long ago (see ``django_durajobs.store.prune``)."""

from __future__ import annotations

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError

from django_durajobs.store import prune


class Command(BaseCommand):
    help = "Delete jobs that ended more than --days ago, with their steps and log."

    def add_arguments(self, parser):
        parser.add_argument(
            "--days", type=float, default=30.0, help="Keep jobs that ended this recently (default 30)."
        )
        parser.add_argument("--dry-run", action="store_true", help="Only count what would be deleted.")

    def handle(self, *args, **options):
        if options["days"] < 0:
            raise CommandError("--days cannot be negative.")
        count = prune(timedelta(days=options["days"]), dry_run=options["dry_run"])
        verb = "Would delete" if options["dry_run"] else "Deleted"
        self.stdout.write(f"{verb} {count} job(s) that ended more than {options['days']:g} days ago.")
