"""Jobs, their checkpointed steps and their log, as rows.

Over 400 lines: ``Job`` carries its documented public methods (``job.resume()``, ...), each a line
that hands over to ``facades``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core import checks
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .awaitables import awaitable
from .indexes import JOB_INDEXES
from .querysets import JobQuerySet
from .registry import facades
from .routers import creator_deleted
from .status import TERMINAL, Phase, Status, StepState
from .values import EVENT_NAME_MAX_LENGTH

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

#: An offered action's id becomes the job's ``resume_action`` when it is chosen.
ACTION_ID_MAX_LENGTH = 100


class Job(models.Model):
    class ActorType(models.TextChoices):
        USER = "user", _("User")
        SYSTEM = "system", _("System")
        API = "api", _("API")

    kind = models.CharField(_("kind"), max_length=100)
    kind_version = models.CharField(_("kind version"), max_length=100, blank=True, default="")
    label = models.CharField(_("label"), max_length=255)
    status = models.CharField(_("status"), max_length=20, choices=Status.choices, default=Status.QUEUED)
    phase = models.CharField(_("phase"), max_length=10, choices=Phase.choices, default=Phase.RUN)
    subject = models.JSONField(_("subject"), default=dict)
    queue = models.CharField(_("queue"), max_length=100, default="default")
    priority = models.SmallIntegerField(
        _("priority"), default=0, help_text=_("-100 to 100; larger runs sooner.")
    )

    attempt = models.PositiveIntegerField(_("attempt"), default=0)
    max_attempts = models.PositiveIntegerField(_("max attempts"), default=1)
    next_run_at = models.DateTimeField(
        _("next run"),
        null=True,
        blank=True,
        help_text=_("When a queued job is due, or when a timed wait wakes."),
    )

    locked_by = models.CharField(_("locked by"), max_length=255, blank=True, default="")
    locked_at = models.DateTimeField(_("lease renewed at"), null=True, blank=True)
    lease_token = models.CharField(_("lease token"), max_length=32, blank=True, default="")
    worker_losses = models.PositiveSmallIntegerField(_("worker losses"), default=0)
    interrupted = models.BooleanField(
        _("interrupted"),
        default=False,
        help_text=_(
            "Handed back by a lost or stopping worker: claimed before the jobs of its priority "
            "that have not started, until it runs again."
        ),
    )

    result = models.JSONField(_("result"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True, default="")
    error_code = models.CharField(_("error code"), max_length=100, blank=True, default="")
    wait_reason = models.TextField(_("wait reason"), blank=True, default="")
    user_message = models.TextField(_("user message"), blank=True, default="")
    actions = models.JSONField(_("offered actions"), null=True, blank=True)
    on_deadline = models.CharField(
        _("action at the deadline"),
        max_length=ACTION_ID_MAX_LENGTH,
        blank=True,
        default="",
        help_text=_("Chosen by itself when nobody answers the question by its deadline (next run)."),
    )
    resume_action = models.CharField(
        _("chosen action"), max_length=ACTION_ID_MAX_LENGTH, blank=True, default=""
    )
    resume_data = models.JSONField(_("resume data"), null=True, blank=True)
    eta_at = models.DateTimeField(_("ETA"), null=True, blank=True)
    progress = models.PositiveSmallIntegerField(_("progress"), default=0)
    timeout = models.FloatField(
        _("timeout (seconds)"),
        null=True,
        blank=True,
        help_text=_("How long one try may run, from its claim; past it the try fails with a timeout."),
    )
    cancel_requested = models.BooleanField(_("cancel requested"), default=False)
    pause_requested = models.BooleanField(
        _("pause requested"), default=False, help_text=_("A running job pauses at its next step.")
    )
    waits_for_children = models.BooleanField(
        _("waits for its children"), default=False, help_text=_("Woken when its last open child job settles.")
    )
    waits_for_event = models.CharField(
        _("waits for event"),
        max_length=EVENT_NAME_MAX_LENGTH,
        blank=True,
        default="",
        help_text=_("Woken when an event of this name is sent."),
    )
    #: ``{"reason", "count", "last_at"}``: a timed wait checked again with the same reason, counted.
    wait_checks = models.JSONField(_("wait checks"), null=True, blank=True)
    #: ``{event name: how many waits for it timed out}``: a re-entered run's waits time out again.
    timed_out_events = models.JSONField(_("timed-out event waits"), null=True, blank=True)

    idempotency_key = models.CharField(_("idempotency key"), max_length=255, null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("created by"),
        null=True,
        blank=True,
        on_delete=creator_deleted,
        related_name="+",
        db_constraint=False,  # the users may live in another database (DURAJOBS["DATABASE"])
        db_index=False,  # durajobs_created_by, which leaves out the jobs nobody created
    )
    actor_type = models.CharField(_("actor type"), max_length=20, default=ActorType.USER)
    group_id = models.CharField(_("group"), max_length=255, blank=True, default="")
    subject_type = models.CharField(_("subject type"), max_length=100, blank=True, default="")
    subject_id = models.CharField(_("subject id"), max_length=255, blank=True, default="")
    parent = models.ForeignKey(
        "self",
        verbose_name=_("parent job"),
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="children",
        db_index=False,  # durajobs_parent starts with it
    )
    rerun_of = models.ForeignKey(
        "self",
        models.SET_NULL,
        verbose_name=_("rerun of"),
        null=True,
        blank=True,
        related_name="reruns",
        db_index=False,  # durajobs_rerun_of, which leaves out the jobs that are no rerun
    )
    fairness_key = models.CharField(
        _("fairness key"),
        max_length=255,
        blank=True,
        default="",
        help_text=_("Claims take turns among the keys of the due jobs (docs/limits.md#fair-shares)."),
    )
    #: Whether a limit applied to its kind or queue when it was enqueued: the claim of the jobs no
    #: limit applies to then never reads it (store/holding.py, "The lanes").
    under_limits = models.BooleanField(_("under limits"), default=False, editable=False)
    external_ref = models.CharField(_("external reference"), max_length=255, blank=True, default="")
    concurrency_key = models.CharField(
        _("concurrency key"),
        max_length=255,
        blank=True,
        default="",
        help_text=_("Jobs with one key run no more at once than their kind's concurrency limit."),
    )

    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    #: When its worker claimed it for the try under way (its timeout counts from then).
    try_started_at = models.DateTimeField(_("try started"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)
    #: The W3C trace context current at the enqueue, so the job's spans join its trace.
    traceparent = models.CharField(_("trace context"), max_length=55, null=True, blank=True, editable=False)

    #: Not a field: on a job a claim returns, the step the claim marked running with it (the
    #: first declared step of a first run, ``store/checkpoints.py``), or None.
    step_started_by_claim: str | None = None

    objects = JobQuerySet.as_manager()

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        ordering = ["-created_at", "-id"]
        indexes = JOB_INDEXES
        constraints = [
            # A constraint rather than unique=True: no second index for LIKE on PostgreSQL.
            models.UniqueConstraint(fields=["idempotency_key"], name="durajobs_idempotency_key"),
        ]
        permissions = [
            ("operate_job", _("Can resume, retry, pause and cancel jobs and answer their questions")),
            ("revert_job", _("Can revert jobs")),
        ]

    @classmethod
    def check(cls, **kwargs: Any) -> list[checks.CheckMessage]:
        # MariaDB and MySQL build durajobs_created_by over every row, which serves its one lookup as
        # well; Django 6 runs the database checks before every command and would warn each time.
        return [message for message in super().check(**kwargs) if message.id != "models.W037"]

    def __str__(self) -> str:
        # Not get_status_display(), which rebuilds the choices on every call: the admin names
        # each job of an action over thousands in its history.
        status: StrOrPromise
        try:
            status = Status(self.status).label
        except ValueError:
            status = self.status
        return f"{self.label} (#{self.pk}, {status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    # The operations, as methods: ``job.resume(by=request.user)``.
    def resume(self, by=None, action=None, data=None) -> Job:
        return facades().resume(self, by=by, action=action, data=data)

    def retry(self, by=None) -> Job:
        return facades().retry(self, by=by)

    def pause(self, by=None) -> Job:
        return facades().pause(self, by=by)

    def cancel(self, by=None) -> Job:
        return facades().cancel(self, by=by)

    def revert(self, by=None) -> Job:
        return facades().revert(self, by=by)

    def update(self, **fields) -> Job:
        return facades().update(self, **fields)

    def rerun(self, from_step: str, by=None) -> Job:
        return facades().rerun(self, from_step=from_step, by=by)

    def children_summary(self) -> dict:
        return facades().children_summary(self)

    def describe(self) -> dict:
        return facades().describe(self)

    # And awaited, for async code: ``await job.acancel(by=request.user)``.
    aresume = awaitable(resume)
    aretry = awaitable(retry)
    apause = awaitable(pause)
    acancel = awaitable(cancel)
    arevert = awaitable(revert)
    aupdate = awaitable(update)
    achildren_summary = awaitable(children_summary)
    adescribe = awaitable(describe)


class JobsDashboard(Job):
    """The dashboard's link on the admin's index: no table or permissions of its own."""

    class Meta:
        proxy = True
        verbose_name = verbose_name_plural = _("jobs dashboard")
        default_permissions = ()


class JobStep(models.Model):
    """One checkpoint of a job's run (or of its revert, which has checkpoints of its own)."""

    job = models.ForeignKey(
        Job,
        on_delete=models.CASCADE,
        related_name="steps",
        verbose_name=_("job"),
        db_index=False,  # durajobs_step_unique starts with it
    )
    phase = models.CharField(_("phase"), max_length=10, choices=Phase.choices, default=Phase.RUN)
    position = models.PositiveIntegerField(_("position"))
    step_id = models.CharField(_("step"), max_length=100)
    title = models.CharField(_("title"), max_length=255)
    state = models.CharField(_("state"), max_length=20, choices=StepState.choices, default=StepState.PENDING)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)
    detail = models.TextField(_("detail"), blank=True, default="")
    error = models.TextField(_("error"), blank=True, default="")
    result = models.JSONField(_("result"), null=True, blank=True)

    class Meta:
        verbose_name = _("step")
        verbose_name_plural = _("steps")
        ordering = ["job", "phase", "position"]
        constraints = [
            models.UniqueConstraint(fields=["job", "phase", "step_id"], name="durajobs_step_unique"),
        ]
        # A job's steps in their order: its page and live summary read the current, next and
        # latest completed ones through it, however many steps it has. Positions never change,
        # so a checkpoint writes nothing into it.
        indexes = [models.Index(fields=["job", "phase", "position"], name="durajobs_step_order")]

    def __str__(self) -> str:
        return f"{self.step_id} ({self.state})"


class Event(models.Model):
    """A named event, kept once sent: a job that waits for it later gets its payload at once.

    The first send of a name wins; its payload is stored intact (the waiting jobs receive what was
    sent) and redacted wherever it is shown.
    """

    name = models.CharField(_("name"), max_length=EVENT_NAME_MAX_LENGTH, unique=True)
    payload = models.JSONField(_("payload"), null=True, blank=True)
    sent_at = models.DateTimeField(_("sent"), default=timezone.now, db_index=True)
    sent_by = models.CharField(_("sent by"), max_length=255, blank=True, default="")

    class Meta:
        verbose_name = _("event")
        verbose_name_plural = _("events")
        ordering = ["-sent_at", "-id"]

    def __str__(self) -> str:
        return self.name


class LogLineId(models.BigAutoField):
    """An auto-increasing id that on SQLite is a plain ``INTEGER PRIMARY KEY``, without
    ``AUTOINCREMENT``.

    Every job writes a log line, and ``AUTOINCREMENT`` makes each insert rewrite the
    ``sqlite_sequence`` table too: a page more in every commit. A new line's id is still
    larger than every id in the table, so a job's lines stay in order; only the id of a
    deleted newest line may come back.
    """

    def db_type_suffix(self, connection):
        if connection.vendor == "sqlite":
            return None
        return super().db_type_suffix(connection)


class JobLog(models.Model):
    """A log line of a job, redacted before it was stored."""

    id = LogLineId(primary_key=True, serialize=False, verbose_name="ID")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_lines", verbose_name=_("job"))
    at = models.DateTimeField(_("at"), auto_now_add=True)
    line = models.TextField(_("line"))

    class Meta:
        verbose_name = _("log line")
        verbose_name_plural = _("log lines")
        ordering = ["job", "id"]

    def __str__(self) -> str:
        return self.line


class Schedule(models.Model):
    """A schedule: its kind is enqueued at each of its moments, once across the fleet.

    Those of ``@job(schedule=…)`` and ``DURAJOBS["SCHEDULES"]`` are written here when a worker
    starts (an operator's enabling or disabling stays); operators add others in the admin.
    """

    class Source(models.TextChoices):
        CODE = "code", _("@job(schedule=…)")
        SETTINGS = "settings", _('DURAJOBS["SCHEDULES"]')
        ADMIN = "admin", _("Added in the admin")

    class Missed(models.TextChoices):
        ONCE = "once", _("Run once for all the missed moments")
        SKIP = "skip", _("Skip them")

    name = models.CharField(_("name"), max_length=200, unique=True)
    kind = models.CharField(_("kind"), max_length=100)
    subject = models.JSONField(_("subject"), default=dict, blank=True)
    cron = models.CharField(
        _("cron"), max_length=200, blank=True, default="", help_text=_("Such as */15 * * * *.")
    )
    every_seconds = models.PositiveIntegerField(
        _("every (seconds)"), null=True, blank=True, help_text=_("Instead of a cron expression.")
    )
    timezone = models.CharField(
        _("time zone"), max_length=100, blank=True, default="", help_text=_("Blank: the site's TIME_ZONE.")
    )
    missed = models.CharField(_("missed moments"), max_length=10, choices=Missed.choices, default=Missed.ONCE)
    enabled = models.BooleanField(_("enabled"), default=True)
    source = models.CharField(_("defined by"), max_length=10, choices=Source.choices, default=Source.ADMIN)
    next_run_at = models.DateTimeField(_("next run"), null=True, blank=True)
    last_run_at = models.DateTimeField(_("last run"), null=True, blank=True)
    last_job = models.ForeignKey(
        Job, verbose_name=_("last job"), null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ["name"]
        # A worker's tick: the enabled schedules that are due.
        indexes = [models.Index(fields=["enabled", "next_run_at"], name="durajobs_schedule_due")]

    def __str__(self) -> str:
        return self.name


class JobLimit(models.Model):
    """One limit's row: what claims of a job under that limit lock while they count what runs, and,
    for a kind with a rate limit, its latest starts.

    Made by the first claim that needs it; see ``store/limiting.py``.
    """

    class Scope(models.TextChoices):
        KEY = "key", _("concurrency key")
        KIND = "kind", _("kind")
        QUEUE = "queue", _("queue")
        THROTTLE = "throttle", _("throttle")

    scope = models.CharField(_("scope"), max_length=10, choices=Scope.choices)
    name = models.CharField(_("name"), max_length=255)
    #: A rate-limited kind's latest starts (POSIX seconds, oldest first), at most its rate's count.
    starts = models.JSONField(_("latest starts"), default=list, blank=True)
    #: When its rate lets the kind start again, while the latest starts fill the rate.
    full_until = models.DateTimeField(_("full until"), null=True, blank=True)

    class Meta:
        verbose_name = _("limit")
        verbose_name_plural = _("limits")
        constraints = [models.UniqueConstraint(fields=["scope", "name"], name="durajobs_limit_unique")]

    def __str__(self) -> str:
        return f"{self.scope} {self.name}"


from .tallies import FinishedTally, TallyMark  # noqa: E402, F401  (models of their own module)
from .worker_rows import Worker  # noqa: E402, F401
