"""Jobs, their checkpointed steps and their log, as rows."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from .status import TERMINAL, WAITING, Phase, Status, StepState


class JobQuerySet(models.QuerySet):
    def queued(self) -> JobQuerySet:
        return self.filter(status=Status.QUEUED)

    def running(self) -> JobQuerySet:
        return self.filter(status=Status.RUNNING)

    def waiting(self) -> JobQuerySet:
        return self.filter(status__in=WAITING)

    def terminal(self) -> JobQuerySet:
        return self.filter(status__in=TERMINAL)

    def unfinished(self) -> JobQuerySet:
        return self.exclude(status__in=TERMINAL)


class Job(models.Model):
    class ActorType(models.TextChoices):
        USER = "user", _("User")
        SYSTEM = "system", _("System")
        API = "api", _("API")

    kind = models.CharField(_("kind"), max_length=100)
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

    result = models.JSONField(_("result"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True, default="")
    error_code = models.CharField(_("error code"), max_length=100, blank=True, default="")
    wait_reason = models.TextField(_("wait reason"), blank=True, default="")
    user_message = models.TextField(_("user message"), blank=True, default="")
    actions = models.JSONField(_("offered actions"), null=True, blank=True)
    resume_action = models.CharField(_("chosen action"), max_length=100, blank=True, default="")
    resume_data = models.JSONField(_("resume data"), null=True, blank=True)
    eta_at = models.DateTimeField(_("ETA"), null=True, blank=True)
    progress = models.PositiveSmallIntegerField(_("progress"), default=0)
    cancel_requested = models.BooleanField(_("cancel requested"), default=False)
    waits_for_children = models.BooleanField(
        _("waits for its children"), default=False, help_text=_("Woken when its last open child job settles.")
    )

    idempotency_key = models.CharField(_("idempotency key"), max_length=255, null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("created by"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
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
    external_ref = models.CharField(_("external reference"), max_length=255, blank=True, default="")

    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    ended_at = models.DateTimeField(_("ended"), null=True, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        ordering = ["-created_at", "-id"]
        # Every claim and outcome changes the status, so each writes an entry into every index:
        # there are no more of them than the lookups need.
        indexes = [
            # What workers claim, in claim order, and timed waits to wake. Status leads, so
            # finished jobs, however many, are never scanned.
            models.Index(fields=["status", "-priority", "next_run_at", "id"], name="durajobs_due"),
            models.Index(fields=["group_id", "created_at"], name="durajobs_group"),
            models.Index(fields=["subject_type", "subject_id", "created_at"], name="durajobs_subject"),
            models.Index(fields=["parent", "created_at"], name="durajobs_parent"),
            models.Index(fields=["kind", "created_at"], name="durajobs_kind"),
            # For deleting a user; jobs the system created are not in it.
            models.Index(
                fields=["created_by"],
                condition=models.Q(created_by__isnull=False),
                name="durajobs_created_by",
            ),
        ]
        constraints = [
            # A constraint rather than unique=True: no second index for LIKE on PostgreSQL.
            models.UniqueConstraint(fields=["idempotency_key"], name="durajobs_idempotency_key"),
        ]
        permissions = [
            ("operate_job", _("Can resume, retry, pause and cancel jobs and answer their questions")),
            ("revert_job", _("Can revert jobs")),
        ]

    def __str__(self) -> str:
        # Not get_status_display(), which rebuilds the choices on every call: the admin names
        # each job of an action over thousands in its history.
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
        from . import ops

        return ops.resume(self, by=by, action=action, data=data)

    def retry(self, by=None) -> Job:
        from . import ops

        return ops.retry(self, by=by)

    def pause(self, by=None) -> Job:
        from . import ops

        return ops.pause(self, by=by)

    def cancel(self, by=None) -> Job:
        from . import ops

        return ops.cancel(self, by=by)

    def revert(self, by=None) -> Job:
        from . import ops

        return ops.revert(self, by=by)

    def update(self, **fields) -> Job:
        from . import ops

        return ops.update(self, **fields)

    def children_summary(self) -> dict:
        from .engine.describe import children_summary

        return children_summary(self)

    def describe(self) -> dict:
        from .engine.describe import describe

        return describe(self)


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
