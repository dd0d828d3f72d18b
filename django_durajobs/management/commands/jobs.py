"""``manage.py jobs``: list, show, watch and operate jobs from a terminal (docs/cli.md)."""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Callable
from typing import Any, TextIO, cast

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_durajobs import ops
from django_durajobs.cli import arguments, screens
from django_durajobs.cli.commands import TranslatedCommand
from django_durajobs.cli.output import Output
from django_durajobs.cli.watching import watch
from django_durajobs.engine.describe import describe, row_summaries
from django_durajobs.errors import JobError
from django_durajobs.models import Job
from django_durajobs.reruns import rerun
from django_durajobs.status import Status
from django_durajobs.store import find_jobs, job_stats

OPERATIONS: dict[str, Callable[..., Job]] = {
    "resume": ops.resume,
    "retry": ops.retry,
    "pause": ops.pause,
    "cancel": ops.cancel,
    "revert": ops.revert,
    "rerun": rerun,
}


class Command(TranslatedCommand):
    help = gettext_lazy("List, show, watch and operate durable jobs.")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        shown = argparse.ArgumentParser(add_help=False)
        shown.add_argument("--json", action="store_true", help=_("Print JSON, shaped as describe()."))
        shown.add_argument("--plain", action="store_true", help=_("Plain text, even with rich installed."))
        commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

        listing = commands.add_parser("list", parents=[shown], help=_("The newest jobs, filtered."))
        for flag, dest, metavar, text in (
            ("--status", "statuses", "STATUS", _("Only jobs in this status (repeatable).")),
            ("--kind", "kinds", "KIND", _("Only jobs of this kind (repeatable).")),
            ("--queue", "queues", "QUEUE", _("Only jobs of this queue (repeatable).")),
        ):
            listing.add_argument(flag, action="append", dest=dest, default=[], metavar=metavar, help=text)
        listing.add_argument(
            "--subject",
            action="append",
            type=arguments.subject_filter,
            default=[],
            metavar="FILTER",
            help=_(
                "Only jobs whose subject contains this: KEY=TEXT, KEY:=JSON (KEY may be a.b for "
                "a nested key) or a JSON object (repeatable)."
            ),
        )
        listing.add_argument("--parent", metavar="ID", help=_("Only the child jobs of this job."))
        listing.add_argument(
            "--limit", type=int, default=50, help=_("How many jobs at most, newest first (default 50).")
        )

        show = commands.add_parser("show", parents=[shown], help=_("A job's summary, steps and log."))
        show.add_argument("job_id", metavar="ID")
        show.add_argument("--log", type=int, default=20, help=_("How many of its latest log lines (20)."))

        for name, text in (
            ("resume", _("Queue a waiting job again (answer a question with --action).")),
            ("retry", _("Queue a failed job again, with one more attempt.")),
            ("pause", _("Pause a job; a running one pauses at its next step.")),
            ("cancel", _("Cancel a job; a running one stops at its next step.")),
            ("revert", _("Run a job's revert.")),
            ("rerun", _("Run a job again as a new job from a step, reusing the steps before it.")),
        ):
            operation = commands.add_parser(name, parents=[shown], help=text)
            operation.add_argument("job_id", metavar="ID")
            operation.add_argument(
                "--by",
                metavar="USERNAME",
                help=_("The user recorded in the job's log (default: the operating-system user)."),
            )
            if name == "rerun":
                operation.add_argument(
                    "--from", dest="from_step", required=True, metavar="STEP", help=_("The step to run from.")
                )
            if name == "resume":
                operation.add_argument("--action", help=_("The answer chosen, one of those offered."))
                operation.add_argument(
                    "--data", type=arguments.json_value, help=_("JSON the run receives with it.")
                )

        watching = commands.add_parser(
            "watch", parents=[shown], help=_("Follow a job until it ends: exit 0 done, 1 failed.")
        )
        watching.add_argument("job_id", metavar="ID")
        watching.add_argument(
            "--interval", type=float, default=0.5, help=_("Seconds between two looks (default 0.5).")
        )
        watching.add_argument(
            "--timeout", type=float, help=_("Stop watching after this many seconds (exit 2).")
        )

        commands.add_parser(
            "stats", parents=[shown], help=_("Counts by status and queue, queue lag, workers seen lately.")
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # The stream that OutputWrapper wraps: the stubs see its attributes only as methods.
        output = Output(cast(TextIO, self.stdout._out), plain=options["plain"])
        command = options["command"]
        try:
            if command in OPERATIONS:
                self.operate(command, output, options)
            else:
                getattr(self, f"command_{command}")(output, options)
        except JobError as error:
            raise CommandError(_("%(message)s (%(code)s)") % {"message": error, "code": error.code}) from None

    def command_list(self, output: Output, options: dict[str, Any]) -> None:
        limit = options["limit"]
        if not 1 <= limit <= 10_000:
            raise CommandError(_("--limit must be from 1 to 10000."))
        jobs = find_jobs(
            statuses=options["statuses"],
            kinds=options["kinds"],
            queues=options["queues"],
            parent=options["parent"],
            subject=arguments.merged(options["subject"]) or None,
        )
        found = list(jobs[: limit + 1])
        summaries = row_summaries(list(found[:limit]))
        if options["json"]:
            output.json(summaries)
            return
        screens.job_list(output, summaries, more=len(found) > limit)

    def command_show(self, output: Output, options: dict[str, Any]) -> None:
        summary = describe(options["job_id"])
        if options["json"]:
            output.json(summary)
            return
        screens.job_page(output, summary, log_lines=max(options["log"], 0))

    def command_watch(self, output: Output, options: dict[str, Any]) -> None:
        if options["interval"] <= 0:
            raise CommandError(_("--interval must be a positive number of seconds."))
        try:
            ended = watch(
                options["job_id"],
                output,
                interval=options["interval"],
                timeout=options["timeout"],
                as_json=options["json"],
            )
        except KeyboardInterrupt:
            raise CommandError(_("Stopped watching; the job goes on."), returncode=130) from None
        if ended is None:
            raise CommandError(_("The job has not ended yet."), returncode=2)
        if ended["status"] not in (Status.DONE, Status.REVERTED):
            raise CommandError(screens.ending(ended))

    def command_stats(self, output: Output, options: dict[str, Any]) -> None:
        stats = job_stats()
        if options["json"]:
            output.json(stats)
            return
        screens.stats(output, stats)

    def operate(self, name: str, output: Output, options: dict[str, Any]) -> None:
        extra = {"action": options["action"], "data": options["data"]} if name == "resume" else {}
        if name == "rerun":
            extra = {"from_step": options["from_step"]}
        job = OPERATIONS[name](options["job_id"], by=self.actor(options["by"]), **extra)
        if options["json"]:
            output.json(describe(job))
            return
        output.line(screens.operated(name, job))

    def actor(self, username: str | None) -> Any:
        """Who operates: the named Django user, or the operating-system user as text."""
        if username is None:
            try:
                return f"{getpass.getuser()} (manage.py jobs)"
            except (OSError, KeyError):
                return "manage.py jobs"
        users = get_user_model()._default_manager
        try:
            return users.get_by_natural_key(username)
        except users.model.DoesNotExist:
            raise CommandError(_("No user is named %(name)r.") % {"name": username}) from None
