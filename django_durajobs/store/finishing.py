"""PostgreSQL's finish of a run in one statement: the outcome, its log line, the word to idle
workers and the worker's next claim (with the start of that job's first step), one round trip."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import Job, JobLog
from ..status import Status
from . import sql
from .changes import NOTIFY_CHANNEL
from .checkpoints import FIRST_STEP_PARAMS, claimed_job, first_step_started, started_step_id
from .claiming import ClaimRequest, claim_params, claim_sql
from .fairness import KEYLESS
from .log import clean_log_line

#: The next claim a finish makes: kinds, queues passed over, the claim request, whether of a job
#: without a fairness key, whether in the plain lane.
NextClaim = tuple[list[str], tuple[str, ...], ClaimRequest, bool, bool]


def finish_in_one_statement(
    db: BaseDatabaseWrapper,
    queue: str,
    update: sql.Statement,
    params: list[Any],
    said: tuple[str | None, bool, datetime],
    next_claim: NextClaim | None,
) -> tuple[bool, Job | None]:
    """``update`` (the fenced outcome of a job of ``queue``) with what is ``said`` (its log line,
    whether to tell idle workers that a job of the queue may start, and the moment), and with
    ``next_claim`` the next claim: whether the job was still this lease's, and the job claimed."""
    log_line, notify, now = said
    claimed_shape: tuple[Any, ...] = ()
    if next_claim:
        kinds, passed_over, request, keyless, lane = next_claim
        claimed_shape = (len(kinds), len(request.queues), len(passed_over), keyless, lane)
    shape = (update, bool(log_line), notify, *claimed_shape)
    statement = sql.statement(db, ("finish", *shape), lambda: finish_sql(db, *shape))
    params = list(params)
    if log_line:
        params += [now, clean_log_line(log_line)]
    if notify:
        params += [NOTIFY_CHANNEL, queue]
    if next_claim:
        params += [*claim_params(db, Status.QUEUED, kinds, request, now, passed_over), *FIRST_STEP_PARAMS]
    rows = sql.fetch(db, statement, params)
    if not rows:
        return False, None
    return True, claimed_job(db, rows[0]) if next_claim and rows[0][0] is not None else None


def finish_sql(
    db: BaseDatabaseWrapper,
    update: sql.Statement,
    logs: bool = True,
    notify: bool = False,
    kinds: int = 0,
    queues: int = 0,
    passed_over: int = 0,
    keyless: bool = False,
    plain_lane: bool = False,
) -> str:
    """``update`` (the fenced outcome), with ``logs`` its log line, with ``notify`` a ``pg_notify``
    (sent as the statement commits) and, with ``kinds``, the next claim (with ``keyless``, of a job
    without a fairness key; with ``plain_lane``, among the jobs not enqueued under limits)."""
    quote = db.ops.quote_name
    finished = f"WITH finished AS ({update.text} RETURNING {quote('id')})"
    if logs:
        log_table = sql.table(db, JobLog)
        finished += (
            f", logged AS (INSERT INTO {log_table} (job_id, at, line) SELECT id, %s, %s FROM finished)"
        )
    # A CTE that only reads runs only if the statement reads it: the notice is joined in.
    source = "finished"
    if notify:
        finished += ", notified AS (SELECT pg_notify(%s, %s) FROM finished)"
        source = "finished CROSS JOIN notified"
    if not kinds:
        return f"{finished} SELECT finished.id FROM {source}"
    only_if = (KEYLESS[0] if keyless else "") + " AND EXISTS (SELECT 1 FROM finished)"
    claim = claim_sql(db, Status.QUEUED, kinds, queues, "", passed_over, only_if, plain_lane)
    return (
        f"{finished}, claimed AS ({claim}), {first_step_started(db)} "
        f"SELECT claimed.*, {started_step_id(db)} FROM {source} LEFT JOIN claimed ON true"
    )
