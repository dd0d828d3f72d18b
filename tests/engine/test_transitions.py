"""The transitions table against an expected table written out here, for every status, phase and
event; and the diagram in docs/concepts.md against the table. No database."""

from __future__ import annotations

import itertools
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from django_durajobs import transitions
from django_durajobs.status import Phase, Status
from django_durajobs.transitions import (
    ATTEMPT_COUNTED,
    ATTEMPT_GIVEN_BACK,
    GIVEN,
    ONE_MORE_TRY,
    Event,
    NotAllowed,
    allows,
    transition,
)

WAITS = "awaiting_external needs_user paused awaiting_approval awaiting_payment not_ready needs_setup"
EXTERNAL = "awaiting_external awaiting_approval awaiting_payment not_ready needs_setup"

# event -> phase -> "source source …" -> target ("*" for a wait: the run picks one of EXTERNAL)
EXPECTED: dict[Event, dict[str, dict[str, str]]] = {
    Event.RESUME: {"run": {WAITS: "queued"}},
    Event.RETRY: {"run": {"failed needs_user": "queued"}, "revert": {"failed": "reverting"}},
    Event.PAUSE: {"run": {"queued awaiting_external": "paused"}},
    Event.CANCEL: {"run": {f"queued {WAITS}": "cancelled"}},
    Event.REQUEST_CANCEL: {"run": {"running": "running"}},
    Event.REQUEST_PAUSE: {"run": {"running": "running"}},
    Event.REVERT: {"run": {"done failed needs_user": "reverting"}, "revert": {"failed": "reverting"}},
    Event.WAKE: {"run": {EXTERNAL: "queued"}},
    Event.DEADLINE: {"run": {"needs_user": "queued"}},
    Event.CHILDREN_SETTLED: {"run": {"awaiting_external": "queued"}, "revert": {"reverting": "reverting"}},
    Event.EVENT_SENT: {"run": {"awaiting_external": "queued"}},
    Event.CLAIM: {"run": {"queued": "running"}, "revert": {"reverting": "reverting"}},
    Event.RELEASE: {"run": {"running": "queued"}, "revert": {"reverting": "reverting"}},
    Event.WORKER_LOST: {"run": {"running": "failed"}, "revert": {"reverting": "failed"}},
    Event.CANNOT_START_YET: {"run": {"queued": "queued"}},
    Event.CANNOT_START: {"run": {"queued": "failed"}},
    Event.DONE: {"run": {"running": "done"}, "revert": {"reverting": "reverted"}},
    Event.WAIT: {"run": {"running": "*"}},
    Event.WAIT_FOR_CHILDREN: {"run": {"running": "awaiting_external"}, "revert": {"reverting": "reverting"}},
    Event.WAIT_FOR_EVENT: {"run": {"running": "awaiting_external"}},
    Event.ASK: {"run": {"running": "needs_user"}},
    Event.RETRY_LATER: {"run": {"running": "queued"}, "revert": {"reverting": "reverting"}},
    Event.CANCELLED: {"run": {"running": "cancelled"}},
    Event.PAUSED: {"run": {"running": "paused"}},
    Event.RETRY_AFTER_ERROR: {"run": {"running": "queued"}},
    Event.FAIL: {"run": {"running": "failed"}, "revert": {"reverting": "failed"}},
}


def expected_target(event: Event, phase: str, status: str) -> str | None:
    for sources, target in EXPECTED[event].get(phase, {}).items():
        if status in sources.split():
            return target
    return None


def test_every_event_is_expected():
    assert set(EXPECTED) == set(Event)


def test_each_status_phase_and_event():
    wrong = []
    for event, phase, status in itertools.product(Event, Phase, Status):
        target = expected_target(event, phase, status)
        if allows(event, phase, status) is not (target is not None):
            wrong.append(f"{event} from {status} ({phase}): expected {target or 'refused'}")
            continue
        if target is None:
            with pytest.raises(NotAllowed):
                transition(event, phase, status)
            continue
        found = {str(each) for each in transition(event, phase, status).targets}
        if found != (set(EXTERNAL.split()) if target == "*" else {target}):
            wrong.append(f"{event} from {status} ({phase}) leads to {sorted(found)}, expected {target}")
    assert not wrong, "\n".join(wrong)


NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_values_resolve_now_and_given_and_leave_row_markers():
    values = transition(Event.RETRY_AFTER_ERROR, "run").values(
        NOW, next_run_at=NOW, error="boom", error_code="transient"
    )
    assert values == {
        "status": "queued",
        "next_run_at": NOW,
        "error": "boom",
        "error_code": "transient",
        "wait_checks": None,
    }
    assert transition(Event.CLAIM, "run").values(NOW)["attempt"] is ATTEMPT_COUNTED
    assert transition(Event.RETRY, "run").values(NOW)["max_attempts"] is ONE_MORE_TRY
    assert (
        transition(Event.ASK, "run").values(
            NOW, user_message="?", actions=None, next_run_at=None, on_deadline=""
        )["attempt"]
        is ATTEMPT_GIVEN_BACK
    )


def test_values_want_exactly_the_given_fields():
    with pytest.raises(TypeError, match="error"):
        transition(Event.FAIL, "run").values(NOW, error_code="failed")
    with pytest.raises(TypeError, match="surprise"):
        transition(Event.PAUSE, "run").values(NOW, surprise=1)


def test_a_wait_leads_only_to_a_status_a_run_may_wait_in():
    wait = transition(Event.WAIT, "run")
    given = dict(wait_reason="later", eta_at=None, next_run_at=None, wait_checks=None)
    assert wait.values(NOW, status="not_ready", **given)["status"] == "not_ready"
    with pytest.raises(ValueError, match="needs_user"):
        wait.values(NOW, status="needs_user", **given)


def test_what_fields_go_together():
    """The fields an event sets in one write, where forgetting one would show a wrong state."""
    done = transition(Event.DONE, "run").fields
    assert (done["progress"], done["next_run_at"], done["cancel_requested"], done["error"]) == (
        100,
        None,
        False,
        "",
    )
    assert transition(Event.REVERT, "run").fields["phase"] == "revert"
    assert transition(Event.RETRY, "revert").fields["worker_losses"] == 0
    assert transition(Event.RELEASE, "revert").fields.get("attempt") is None  # a revert counts no tries
    assert transition(Event.WORKER_LOST, "run").fields["error_code"] == "worker_lost"
    assert transition(Event.CANCEL, "run").fields["waits_for_children"] is False


def test_the_event_a_job_waited_for_is_kept_only_until_its_run_is_re_entered():
    """A run re-entered with ``waits_for_event`` still set tells by it that its wait timed out. So
    a timed wake leaves it, and so does what happens to that run before it gets back to the wait
    (a release, a retry later); every other way out of the wait, and every other wait, clears it."""
    keeps = {
        (entry.event, entry.phase)
        for entry in transitions.TRANSITIONS.values()
        if "waits_for_event" not in entry.fields
    }
    assert {(event, phase) for event, phase in keeps if phase == "run"} == {
        (Event.WAKE, "run"),
        (Event.CLAIM, "run"),
        (Event.RELEASE, "run"),
        (Event.RETRY_LATER, "run"),
        (Event.RETRY_AFTER_ERROR, "run"),
        (Event.CANNOT_START_YET, "run"),
        (Event.REQUEST_CANCEL, "run"),
        (Event.REQUEST_PAUSE, "run"),
        (Event.CHILDREN_SETTLED, "run"),
    }
    assert transitions.TRANSITIONS[Event.WAIT_FOR_EVENT, Phase.RUN].fields["waits_for_event"] is GIVEN
    for event in (Event.RESUME, Event.PAUSE, Event.CANCEL, Event.EVENT_SENT, Event.DONE, Event.WAIT):
        assert transition(event, "run").fields["waits_for_event"] == "", event


@pytest.mark.parametrize("phase", ["run", "revert"])
def test_a_release_keeps_the_job_s_place_until_it_runs_again(phase):
    """A release leaves the time the job was first due as it is and marks it interrupted (the claim
    orders interrupted work first); the claim that takes it again clears the mark."""
    released = transition(Event.RELEASE, phase).values(NOW)
    assert "next_run_at" not in released
    assert (released["interrupted"], released["wait_reason"]) == (True, "")
    assert transition(Event.CLAIM, phase).values(NOW)["interrupted"] is False


def test_only_a_release_moves_work_up():
    """Every other way back to the queue keeps its time and its place behind interrupted work; an
    operator's pause or cancel of an interrupted job ends its place."""
    marking = {
        (entry.event, entry.phase)
        for entry in transitions.TRANSITIONS.values()
        if entry.fields.get("interrupted")
    }
    assert marking == {(Event.RELEASE, Phase.RUN), (Event.RELEASE, Phase.REVERT)}
    for event in (Event.PAUSE, Event.CANCEL):
        assert transition(event, "run", Status.QUEUED).fields["interrupted"] is False


def test_the_claim_and_the_release_are_the_table_s():
    assert transitions.DUE_STATUSES == {Status.QUEUED, Status.REVERTING}
    assert transitions.HELD_STATUSES == {Status.RUNNING, Status.REVERTING}


def test_refusals_name_the_statuses_allowed():
    assert transitions.described(Event.RETRY) == "failed or needs_user"
    assert transitions.described(Event.REQUEST_CANCEL) == "running"


CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def test_the_diagram_in_the_docs_is_the_table_s():
    text = CONCEPTS.read_text()
    found = re.search(r"<!-- transitions: .*? -->\n(.*?)<!-- end of transitions -->", text, re.S)
    assert found, "docs/concepts.md has no generated transitions section"
    assert found.group(1).strip() == transitions.diagram().strip(), (
        "docs/concepts.md is out of date: paste django_durajobs.transitions.diagram() between its markers"
    )
