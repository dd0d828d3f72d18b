"""The one writer of job rows, a module per concern.

Idempotent enqueue, the schedules' ticks, named events, claiming, the lease a worker holds on a claimed job
(every write it makes is fenced by the lease token), status changes, parents and children,
recovery and pruning; the queries behind the operator's job list and statistics.
Vendor differences stay here. It sits below the engine: nothing here imports ``engine``.
"""

from .changes import (
    NOTIFY_CHANNEL,
    change_status,
    change_status_many,
    notify_due,
    unmark_waiting_steps,
    update_shown_fields,
)
from .claiming import due_jobs_with_subject_key, due_kinds_not_in, passed_over_by_lock
from .database import DatabaseNow, database_now, database_trouble, deadlock, new_token, step_transaction
from .enqueuing import enqueue, enqueue_many
from .events import event_wait_reason, send_event, sent_event, waiters
from .family import (
    cancelled_children,
    children_counts,
    children_listed,
    children_of,
    open_children,
    retried_children,
    reverted_children,
)
from .holding import held_back_reason, held_back_reasons, lift_stale_lanes
from .lease import Lease, StepRowMissing, claim, heartbeat
from .listing import find_jobs, step_counts, subject_keys
from .log import append_log, trim_log
from .overview import job_stats
from .pruning import PruneResult, delete_jobs, prune, prune_events
from .recovery import recover, recover_predecessors
from .reruns import insert_rerun
from .scheduling import (
    declared_schedules,
    delete_schedules,
    row_spec,
    save_schedule,
    set_schedules_enabled,
    sync_schedules,
    tick_schedules,
)
from .sql import database as jobs_connection
from .viewing import JobView, LiveView, job_version_unserved, load_job_view, load_live_view
from .waking import (
    release,
    wake,
    wake_due_waits,
    wake_forgotten_event_waiters,
    wake_forgotten_parents,
)
from .workers import (
    SeenWorker,
    new_worker_id,
    register_worker,
    version_unserved,
    worker_alive,
    worker_listens,
    worker_prefix,
    worker_stopped,
    workers_seen,
)

__all__ = [
    "NOTIFY_CHANNEL",
    "DatabaseNow",
    "JobView",
    "Lease",
    "PruneResult",
    "SeenWorker",
    "StepRowMissing",
    "append_log",
    "change_status",
    "change_status_many",
    "cancelled_children",
    "children_counts",
    "children_listed",
    "children_of",
    "claim",
    "jobs_connection",
    "database_now",
    "database_trouble",
    "deadlock",
    "declared_schedules",
    "delete_jobs",
    "delete_schedules",
    "due_jobs_with_subject_key",
    "due_kinds_not_in",
    "enqueue",
    "enqueue_many",
    "event_wait_reason",
    "find_jobs",
    "heartbeat",
    "load_job_view",
    "load_live_view",
    "LiveView",
    "job_stats",
    "held_back_reason",
    "insert_rerun",
    "job_version_unserved",
    "held_back_reasons",
    "lift_stale_lanes",
    "new_token",
    "passed_over_by_lock",
    "new_worker_id",
    "notify_due",
    "open_children",
    "prune",
    "prune_events",
    "recover",
    "recover_predecessors",
    "register_worker",
    "release",
    "retried_children",
    "reverted_children",
    "row_spec",
    "save_schedule",
    "send_event",
    "sent_event",
    "set_schedules_enabled",
    "step_counts",
    "subject_keys",
    "step_transaction",
    "sync_schedules",
    "tick_schedules",
    "trim_log",
    "unmark_waiting_steps",
    "update_shown_fields",
    "version_unserved",
    "wake",
    "wake_due_waits",
    "wake_forgotten_event_waiters",
    "wake_forgotten_parents",
    "worker_alive",
    "waiters",
    "worker_listens",
    "worker_prefix",
    "worker_stopped",
    "workers_seen",
]
