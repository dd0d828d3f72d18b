"""``manage.py prunejobs``: delete families of jobs that ended long ago (``django_durajobs.prune``)."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from django.apps import apps
from django.core.management.base import CommandError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from django_durajobs.cli import arguments
from django_durajobs.cli.commands import TranslatedCommand
from django_durajobs.errors import JobError
from django_durajobs.store import PruneResult, prune


class Command(TranslatedCommand):
    help = gettext_lazy(
        "Delete jobs that ended more than --older-than ago, with their steps and log, a family at a time."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        age = parser.add_mutually_exclusive_group()
        age.add_argument(
            "--older-than",
            type=arguments.age,
            metavar="AGE",
            help=_("Delete what ended longer ago than this: 30d, 12h, 90m, 2w, 45s (default 30d)."),
        )
        age.add_argument("--days", type=float, help=_("The same in days (--older-than 30d is --days 30)."))
        parser.add_argument(
            "--status",
            action="append",
            dest="statuses",
            metavar="STATUS",
            help=_("Only families whose root job ended so: done, failed, cancelled, reverted (repeatable)."),
        )
        parser.add_argument(
            "--kind", action="append", dest="kinds", metavar="KIND", help=_("Only this kind (repeatable).")
        )
        parser.add_argument("--dry-run", action="store_true", help=_("Only count what would be deleted."))
        parser.add_argument(
            "--batch", type=int, default=1000, help=_("Root jobs deleted per transaction (default 1000).")
        )

    def handle(self, *args: Any, **options: Any) -> None:
        older_than = options["older_than"]
        if options["days"] is not None:
            if options["days"] < 0:
                raise CommandError(_("--days cannot be negative."))
            older_than = timedelta(days=options["days"])
        try:
            result = prune(
                older_than or timedelta(days=30),
                statuses=options["statuses"],
                kinds=options["kinds"],
                dry_run=options["dry_run"],
                batch=options["batch"],
            )
        except JobError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(self.report(result, dry_run=options["dry_run"]))

    def report(self, result: PruneResult, *, dry_run: bool) -> str:
        counts = {"jobs": result.jobs, "families": result.families}
        if dry_run:
            text = ngettext(
                "Would delete %(jobs)d job in %(families)d families.",
                "Would delete %(jobs)d jobs in %(families)d families.",
                result.jobs,
            )
        else:
            text = ngettext(
                "Deleted %(jobs)d job in %(families)d families.",
                "Deleted %(jobs)d jobs in %(families)d families.",
                result.jobs,
            )
        lines = [text % counts]
        others = [
            f"{count} {apps.get_model(label)._meta.verbose_name_plural}"
            for label, count in sorted(result.rows.items())
            if count and label != "django_durajobs.Job"
        ]
        if others:
            lines.append(_("With them: %(rows)s.") % {"rows": ", ".join(others)})
        if result.kept:
            lines.append(
                ngettext(
                    "Kept %(kept)d old family: one of its jobs has not ended, or ended recently.",
                    "Kept %(kept)d old families: one of their jobs has not ended, or ended recently.",
                    result.kept,
                )
                % {"kept": result.kept}
            )
        return "\n".join(lines)
