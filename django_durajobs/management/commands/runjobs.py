"""``manage.py runjobs``: run a worker process (see ``django_durajobs.worker``)."""

from __future__ import annotations

import logging
from typing import TextIO, cast

from django.core.management.base import CommandError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from django_durajobs.cli.commands import TranslatedCommand
from django_durajobs.worker import Worker, WorkerOptions

VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.INFO, 3: logging.DEBUG}


class Command(TranslatedCommand):
    help = gettext_lazy("Run durable jobs: claim due jobs, run them, and recover jobs of lost workers.")

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=1, help=_("Job threads (default 1)."))
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            default=[],
            metavar="NAME",
            help=_("Only run jobs of this queue (repeatable; default: every queue)."),
        )
        parser.add_argument("--burst", action="store_true", help=_("Run what is due now, then exit."))
        parser.add_argument(
            "--poll-interval",
            type=float,
            default=1.0,
            metavar="SECONDS",
            help=_("How often an idle worker looks for due jobs without a wake-up (default 1.0)."),
        )
        parser.add_argument(
            "--worker-id",
            metavar="NAME",
            help=_(
                "A name unique among running workers (e.g. the systemd instance). A worker "
                "restarted under the same name recovers its predecessor's jobs at once."
            ),
        )
        parser.add_argument(
            "--grace",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help=_(
                "On SIGTERM/SIGINT, how long running jobs may take to finish before they are "
                "released to other workers (default 30)."
            ),
        )

    def handle(self, *args, **options):
        if options["concurrency"] < 1:
            raise CommandError(_("--concurrency must be at least 1."))
        if options["poll_interval"] <= 0:
            raise CommandError(_("--poll-interval must be a positive number of seconds."))
        if options["grace"] < 0:
            raise CommandError(_("--grace cannot be negative."))
        name = options["worker_id"]
        if name is not None and (not name.strip() or "@" in name or ":" in name):
            raise CommandError(_("--worker-id must be a non-empty name without '@' or ':'."))
        self._configure_logging(options["verbosity"])
        worker = Worker(
            WorkerOptions(
                concurrency=options["concurrency"],
                queues=tuple(options["queues"]),
                burst=options["burst"],
                poll_interval=options["poll_interval"],
                name=name,
                grace=options["grace"],
            )
        )
        worker.run()
        if worker.crashed:
            raise CommandError(_("A worker thread crashed (see the log above); jobs it held were released."))

    def _configure_logging(self, verbosity: int) -> None:
        """One line per job start/finish/failure on stderr, unless LOGGING already handles it."""
        logger = logging.getLogger("django_durajobs")
        logger.setLevel(VERBOSITY_LEVELS.get(verbosity, logging.DEBUG))
        if not logger.handlers and not logging.getLogger().handlers:
            # The stream that OutputWrapper wraps: the stubs see its attributes only as methods.
            handler = logging.StreamHandler(cast(TextIO, self.stderr._out))
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(message)s"))
            logger.addHandler(handler)
