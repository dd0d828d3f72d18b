"""Every way a job changes state, in one table (DESIGN.md section 2).

An operation (resume, retry…), a run's outcome (done, wait, fail…), the claim, a release by a
stopping or lost worker and the wake-ups are all *triggers*. For each trigger and each phase of a job
(its run, or its revert) the table says which statuses allow it, which status it leads to and which
fields it sets or clears in the same write. The operations, the runner, the claim, recovery and
``describe()``'s ``can_*`` flags read it; ``diagram()`` renders it for docs/concepts.md.

This module is plain Python: it reads no database, so its rules are tested without one. Values
that depend on the row (an attempt given back, one more try allowed) are markers the store turns
into SQL.

Over 400 lines: the table is one literal, read as a whole; split, a transition would be out of the
reader's sight.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import Enum, StrEnum
from types import MappingProxyType
from typing import Any

from django.utils.translation import gettext as _

from .status import EXTERNAL_WAITS, WAITING, Phase, Status


class Trigger(StrEnum):
    # Operations, asked for by a person or a program
    RESUME = "resume"
    RETRY = "retry"
    PAUSE = "pause"
    CANCEL = "cancel"
    REQUEST_CANCEL = "request_cancel"  # a cancel of a running job: it stops at its next step
    REQUEST_PAUSE = "request_pause"  # a pause of a running job: it pauses at its next step
    REVERT = "revert"
    # What the engine does on its own
    WAKE = "wake"  # a timed wait is over
    DEADLINE = "deadline"  # nobody answered a question by its deadline: its on_deadline action is chosen
    CHILDREN_SETTLED = "children_settled"
    EVENT_SENT = "event_sent"  # the event a job waits for was sent
    CLAIM = "claim"
    RELEASE = "release"  # its worker stopped, or was lost: it resumes first, after its last finished step
    WORKER_LOST = "worker_lost"  # lost once too often (MAX_WORKER_LOSSES): it is handed to no other
    # No worker can start it (a task whose module fails to import): held a grace, then failed
    CANNOT_START_YET = "cannot_start_yet"
    CANNOT_START = "cannot_start"
    # The outcomes of a run (or a revert)
    DONE = "done"
    WAIT = "wait"
    WAIT_FOR_CHILDREN = "wait_for_children"
    WAIT_FOR_EVENT = "wait_for_event"
    ASK = "ask"
    RETRY_LATER = "retry_later"
    CANCELLED = "cancelled"
    PAUSED = "paused"  # a requested pause, seen at a step boundary
    RETRY_AFTER_ERROR = "retry_after_error"
    FAIL = "fail"


class Marker(Enum):
    """A value that is only known when the transition happens."""

    NOW = "now"
    NOW_IF_UNSET = "now, if not set yet"
    GIVEN = "given"  # by the caller: the error, the result, the wait's reason…
    ATTEMPT_COUNTED = "attempt + 1"
    ATTEMPT_GIVEN_BACK = "attempt - 1"  # a try that ended in a wait or a release does not count
    ONE_MORE_TRY = "at least attempt + 1"  # max_attempts, so a retried job may run once more

    def __repr__(self) -> str:
        return self.name


NOW, NOW_IF_UNSET, GIVEN = Marker.NOW, Marker.NOW_IF_UNSET, Marker.GIVEN
ATTEMPT_COUNTED, ATTEMPT_GIVEN_BACK, ONE_MORE_TRY = (
    Marker.ATTEMPT_COUNTED,
    Marker.ATTEMPT_GIVEN_BACK,
    Marker.ONE_MORE_TRY,
)
#: The markers the store writes as SQL on the row itself.
ROW_MARKERS = frozenset({ATTEMPT_COUNTED, ATTEMPT_GIVEN_BACK, ONE_MORE_TRY, NOW_IF_UNSET})


class NotAllowed(Exception):
    """The trigger is not allowed from the job's status in its phase."""

    def __init__(self, trigger: Trigger, phase: str, status: str) -> None:
        super().__init__(f"{trigger} is not allowed from {status} ({phase} phase)")
        self.trigger, self.phase, self.status = trigger, phase, status


@dataclass(frozen=True)
class Transition:
    trigger: Trigger
    phase: Phase
    sources: frozenset[Status]
    #: The status it leads to; a run that waits picks one of several (``status=`` given).
    targets: frozenset[Status]
    fields: Mapping[str, Any]

    @property
    def target(self) -> Status:
        [only] = self.targets
        return only

    def values(self, now: datetime, **given: Any) -> dict[str, Any]:
        """The fields to write, ``status`` first: markers resolved with ``now`` and ``given``;
        the row markers (``ROW_MARKERS``) are left for the store to write as SQL."""
        status = given.pop("status", None) if len(self.targets) > 1 else self.target
        if status not in self.targets:
            raise ValueError(f"{self.trigger} leads to one of {sorted(self.targets)}, not {status!r}")
        wanted = {name for name, value in self.fields.items() if value is GIVEN}
        if set(given) != wanted:
            raise TypeError(f"{self.trigger} needs {sorted(wanted)}, was given {sorted(given)}")
        values: dict[str, Any] = {"status": status}
        for name, value in self.fields.items():
            values[name] = now if value is NOW else given[name] if value is GIVEN else value
        return values


# Fields that several transitions set together --------------------------------------------------

#: Nothing is shown as pending any more: no reason, question or answer waits.
NOTHING_PENDING = dict(wait_reason="", user_message="", actions=None, on_deadline="", waits_for_event="")
#: A run that ends otherwise than in a timed wait checked again: its checks are over.
NO_WAIT_CHECKS = dict(wait_checks=None)
#: No operator's request waits to be seen at the job's next step.
NOTHING_REQUESTED = dict(cancel_requested=False, pause_requested=False)
#: A job that ends: nothing left to run, wait for or cancel.
ENDED = dict(
    ended_at=NOW,
    next_run_at=None,
    eta_at=None,
    wait_reason="",
    waits_for_event="",
    **NOTHING_REQUESTED,
    **NO_WAIT_CHECKS,
)
#: A job taken up again: its last error and end are history.
STARTED_AGAIN = dict(next_run_at=NOW, ended_at=None, error="", error_code="", **NOTHING_REQUESTED)
#: A run that stops to wait is re-entered later: this try does not count, no answer is pending.
STOPS_TO_WAIT = dict(attempt=ATTEMPT_GIVEN_BACK, resume_action="", resume_data=None, waits_for_event="")
#: Work handed back half done (its worker was lost, or stopped) goes before the work of its priority
#: that has not started, among its peers in the order it was first due: ``next_run_at`` keeps that
#: time, and the claim orders by priority, then ``interrupted``, then ``next_run_at``. It waits for
#: nothing but a worker.
KEEPS_ITS_PLACE = dict(interrupted=True, wait_reason="")
#: Interrupted work that runs again (a claim), or that an operator sets aside, keeps no place.
NO_PLACE_KEPT = dict(interrupted=False)

RUN, REVERT = Phase.RUN, Phase.REVERT
Q, R = Status.QUEUED, Status.RUNNING


def _statuses(statuses: Status | frozenset[Status] | set[Status]) -> frozenset[Status]:
    return frozenset(statuses) if isinstance(statuses, (set, frozenset)) else frozenset({statuses})


def _entry(trigger: Trigger, phase: Phase, sources: Any, targets: Any, /, **fields: Any) -> Transition:
    return Transition(trigger, phase, _statuses(sources), _statuses(targets), MappingProxyType(fields))


def _entries() -> Iterator[Transition]:
    # Operations
    yield _entry(
        Trigger.RESUME,
        RUN,
        WAITING,
        Q,
        next_run_at=NOW,
        eta_at=None,
        waits_for_children=False,
        resume_action=GIVEN,
        resume_data=GIVEN,
        pause_requested=False,
        **NOTHING_PENDING,
    )
    retried = dict(STARTED_AGAIN, max_attempts=ONE_MORE_TRY, worker_losses=0, **NOTHING_PENDING)
    yield _entry(Trigger.RETRY, RUN, {Status.FAILED, Status.NEEDS_USER}, Q, **retried)
    yield _entry(Trigger.RETRY, REVERT, {Status.FAILED}, Status.REVERTING, **retried)
    yield _entry(
        Trigger.PAUSE,
        RUN,
        {Q, Status.AWAITING_EXTERNAL},
        Status.PAUSED,
        next_run_at=None,
        eta_at=None,
        pause_requested=False,
        waits_for_event="",
        **NO_PLACE_KEPT,
    )
    yield _entry(
        Trigger.CANCEL,
        RUN,
        {Q} | WAITING,
        Status.CANCELLED,
        ended_at=NOW,
        next_run_at=None,
        waits_for_children=False,
        pause_requested=False,
        on_deadline="",
        waits_for_event="",
        user_message="",  # a question nobody need answer now: its log keeps it
        actions=None,
        **NO_PLACE_KEPT,
    )
    yield _entry(Trigger.REQUEST_CANCEL, RUN, R, R, cancel_requested=True)
    yield _entry(Trigger.REQUEST_PAUSE, RUN, R, R, pause_requested=True)
    # A revert's progress is its own: it starts from nothing, whatever the run had reached.
    reverted_again = dict(STARTED_AGAIN, phase=REVERT, progress=0, **NOTHING_PENDING)
    yield _entry(
        Trigger.REVERT,
        RUN,
        {Status.DONE, Status.FAILED, Status.NEEDS_USER},
        Status.REVERTING,
        **reverted_again,
    )
    yield _entry(Trigger.REVERT, REVERT, {Status.FAILED}, Status.REVERTING, **reverted_again)
    # The engine's own. A timed wait for an event keeps ``waits_for_event``: the run it re-enters
    # tells by it that the wait timed out.
    yield _entry(Trigger.WAKE, RUN, EXTERNAL_WAITS, Q, next_run_at=NOW, wait_reason="", eta_at=None)
    yield _entry(
        Trigger.EVENT_SENT,
        RUN,
        Status.AWAITING_EXTERNAL,
        Q,
        next_run_at=NOW,
        eta_at=None,
        wait_reason="",
        waits_for_event="",
    )
    yield _entry(
        Trigger.DEADLINE,
        RUN,
        Status.NEEDS_USER,
        Q,
        next_run_at=NOW,
        eta_at=None,
        resume_action=GIVEN,
        resume_data=None,
        **NOTHING_PENDING,
    )
    settled = dict(waits_for_children=False, wait_reason="", next_run_at=NOW)
    yield _entry(Trigger.CHILDREN_SETTLED, RUN, Status.AWAITING_EXTERNAL, Q, eta_at=None, **settled)
    yield _entry(Trigger.CHILDREN_SETTLED, REVERT, Status.REVERTING, Status.REVERTING, **settled)
    claimed = dict(try_started_at=NOW, **NO_PLACE_KEPT)
    yield _entry(Trigger.CLAIM, RUN, Q, R, attempt=ATTEMPT_COUNTED, started_at=NOW_IF_UNSET, **claimed)
    yield _entry(Trigger.CLAIM, REVERT, Status.REVERTING, Status.REVERTING, **claimed)
    yield _entry(Trigger.RELEASE, RUN, R, Q, attempt=ATTEMPT_GIVEN_BACK, **KEEPS_ITS_PLACE)
    yield _entry(Trigger.RELEASE, REVERT, Status.REVERTING, Status.REVERTING, **KEEPS_ITS_PLACE)
    lost = dict(
        error=GIVEN, error_code="worker_lost", ended_at=NOW, pause_requested=False, waits_for_event=""
    )
    yield _entry(Trigger.WORKER_LOST, RUN, R, Status.FAILED, **lost)
    yield _entry(Trigger.WORKER_LOST, REVERT, Status.REVERTING, Status.FAILED, **lost)
    yield _entry(Trigger.CANNOT_START_YET, RUN, Q, Q, wait_reason=GIVEN, error=GIVEN, error_code=GIVEN)
    yield _entry(Trigger.CANNOT_START, RUN, Q, Status.FAILED, error=GIVEN, error_code=GIVEN, **ENDED)
    # Outcomes
    finished = dict(ENDED, error="", error_code="")
    yield _entry(
        Trigger.DONE,
        RUN,
        R,
        Status.DONE,
        result=GIVEN,
        progress=100,
        resume_action="",
        resume_data=None,
        **finished,
    )
    yield _entry(Trigger.DONE, REVERT, Status.REVERTING, Status.REVERTED, **finished)
    yield _entry(
        Trigger.WAIT,
        RUN,
        R,
        EXTERNAL_WAITS,
        wait_reason=GIVEN,
        eta_at=GIVEN,
        next_run_at=GIVEN,
        waits_for_children=False,
        wait_checks=GIVEN,
        **STOPS_TO_WAIT,
    )
    yield _entry(
        Trigger.WAIT_FOR_CHILDREN,
        RUN,
        R,
        Status.AWAITING_EXTERNAL,
        wait_reason=GIVEN,
        eta_at=None,
        next_run_at=None,
        waits_for_children=True,
        **STOPS_TO_WAIT,
        **NO_WAIT_CHECKS,
    )
    yield _entry(
        Trigger.WAIT_FOR_EVENT,
        RUN,
        R,
        Status.AWAITING_EXTERNAL,
        wait_reason=GIVEN,
        eta_at=GIVEN,
        next_run_at=GIVEN,  # its timeout, if it has one
        waits_for_children=False,
        **dict(STOPS_TO_WAIT, waits_for_event=GIVEN),
        **NO_WAIT_CHECKS,
    )
    yield _entry(
        Trigger.WAIT_FOR_CHILDREN,
        REVERT,
        Status.REVERTING,
        Status.REVERTING,
        wait_reason=GIVEN,
        next_run_at=None,
        waits_for_children=True,
    )
    yield _entry(
        Trigger.ASK,
        RUN,
        R,
        Status.NEEDS_USER,
        user_message=GIVEN,
        actions=GIVEN,
        next_run_at=GIVEN,  # its deadline, if it has one
        on_deadline=GIVEN,
        eta_at=None,
        **STOPS_TO_WAIT,
        **NO_WAIT_CHECKS,
    )
    yield _entry(
        Trigger.RETRY_LATER,
        RUN,
        R,
        Q,
        next_run_at=GIVEN,
        wait_reason=GIVEN,
        attempt=ATTEMPT_GIVEN_BACK,
        **NO_WAIT_CHECKS,
    )
    yield _entry(
        Trigger.RETRY_LATER, REVERT, Status.REVERTING, Status.REVERTING, next_run_at=GIVEN, wait_reason=GIVEN
    )
    yield _entry(Trigger.CANCELLED, RUN, R, Status.CANCELLED, **ENDED)
    yield _entry(
        Trigger.PAUSED,
        RUN,
        R,
        Status.PAUSED,
        next_run_at=None,
        eta_at=None,
        pause_requested=False,
        **STOPS_TO_WAIT,
        **NO_WAIT_CHECKS,
    )
    yield _entry(
        Trigger.RETRY_AFTER_ERROR,
        RUN,
        R,
        Q,
        next_run_at=GIVEN,
        error=GIVEN,
        error_code=GIVEN,
        **NO_WAIT_CHECKS,
    )
    failed = dict(ENDED, error=GIVEN, error_code=GIVEN)
    yield _entry(Trigger.FAIL, RUN, R, Status.FAILED, **failed)
    yield _entry(Trigger.FAIL, REVERT, Status.REVERTING, Status.FAILED, **failed)


TRANSITIONS: Mapping[tuple[Trigger, Phase], Transition] = MappingProxyType(
    {(entry.trigger, entry.phase): entry for entry in _entries()}
)


def transition(trigger: Trigger, phase: str, status: str | None = None) -> Transition:
    """The trigger's transition in ``phase``; with ``status``, ``NotAllowed`` unless it allows it."""
    found = TRANSITIONS.get((trigger, Phase(phase)))
    if found is None or (status is not None and status not in found.sources):
        raise NotAllowed(trigger, phase, status or "any status")
    return found


def allows(trigger: Trigger, phase: str, status: str) -> bool:
    found = TRANSITIONS.get((trigger, Phase(phase)))
    return found is not None and status in found.sources


def sources(trigger: Trigger) -> frozenset[Status]:
    """Every status the trigger is allowed from, in any phase."""
    return frozenset().union(*(entry.sources for entry in TRANSITIONS.values() if entry.trigger == trigger))


def described(*triggers: Trigger) -> str:
    """The statuses the triggers are allowed from in a run, for a refusal: ``"failed or needs_user"``."""
    found = sorted(frozenset().union(*(transition(trigger, RUN).sources for trigger in triggers)))
    if len(found) == 1:
        return found[0]
    return _("%(statuses)s or %(last)s") % {"statuses": ", ".join(found[:-1]), "last": found[-1]}


#: The statuses of a run a rerun (``reruns.rerun``) may start again from one of its steps: the
#: job itself stays as it was (no trigger of its own), and its copy starts queued as an enqueue does.
RERUNNABLE = frozenset({Status.DONE, Status.FAILED, Status.CANCELLED})
#: The statuses a claim takes a job from; its ``next_run_at`` says when it is due.
DUE_STATUSES = sources(Trigger.CLAIM)
#: The same in a fixed order: the index of the due jobs no limit applies to names them as its
#: condition (``durajobs_plain_due``).
CLAIMABLE = tuple(sorted(DUE_STATUSES))
#: The statuses of a job a worker holds (its lease): a release gives it back.
HELD_STATUSES = sources(Trigger.RELEASE)
#: The statuses a job wakes from by itself when its ``next_run_at`` comes (a timed wait, a
#: question's deadline), in a fixed order: the index of those jobs names them as its condition.
WAKES_BY_ITSELF = tuple(sorted(sources(Trigger.WAKE) | sources(Trigger.DEADLINE)))


def _shown(value: Any) -> str:
    if isinstance(value, Marker):
        return value.value
    return repr(str(value) if isinstance(value, str) else value)


def diagram() -> str:
    """The table as Markdown: a Mermaid state diagram per phase and the fields each trigger sets."""
    lines = []
    for phase in Phase:
        lines += ["", f"{phase.label} phase:", "", "```mermaid", "stateDiagram-v2"]
        edges: dict[tuple[str, str], list[str]] = {}
        for entry in TRANSITIONS.values():
            if entry.phase != phase:
                continue
            for source in sorted(entry.sources):
                for target in sorted(entry.targets):
                    edges.setdefault((source, target), []).append(entry.trigger.value)
        lines += [
            f"    {source} --> {target}: {', '.join(triggers)}"
            for (source, target), triggers in edges.items()
        ]
        lines.append("```")
    lines += ["", "| trigger | phase | from | to | sets |", "|---|---|---|---|---|"]
    for entry in TRANSITIONS.values():
        sets = ", ".join(f"`{name}` {_shown(value)}" for name, value in entry.fields.items())
        lines.append(
            f"| {entry.trigger} | {entry.phase} | {', '.join(sorted(entry.sources))} "
            f"| {', '.join(sorted(entry.targets))} | {sets} |"
        )
    return "\n".join(lines[1:]) + "\n"
