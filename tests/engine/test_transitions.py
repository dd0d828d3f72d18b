"""The transitions table against an expected table written out here, for every status, phase and
trigger; and the diagram in docs/concepts.md against the table. No database."""

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
    NotAllowed,
    Trigger,
    allows,
    transition,
)

WAITS = "awaiting_external needs_user paused awaiting_approval awaiting_payment not_ready needs_setup"
EXTERNAL = "awaiting_external awaiting_approval awaiting_payment not_ready needs_setup"

# trigger -> phase -> "source source …" -> target ("*" for a wait: the run picks one of EXTERNAL)
EXPECTED: dict[Trigger, dict[str, dict[str, str]]] = {
    Trigger.RESUME: {"run": {WAITS: "queued"}},
    Trigger.RETRY: {"run": {"failed needs_user": "queued"}, "revert": {"failed": "reverting"}},
    Trigger.PAUSE: {"run": {"queued awaiting_external": "paused"}},
    Trigger.CANCEL: {"run": {f"queued {WAITS}": "cancelled"}},
    Trigger.REQUEST_CANCEL: {"run": {"running": "running"}},
    Trigger.REQUEST_PAUSE: {"run": {"running": "running"}},
    Trigger.REVERT: {"run": {"done failed needs_user": "reverting"}, "revert": {"failed": "reverting"}},
    Trigger.WAKE: {"run": {EXTERNAL: "queued"}},
    Trigger.DEADLINE: {"run": {"needs_user": "queued"}},
    Trigger.CHILDREN_SETTLED: {"run": {"awaiting_external": "queued"}, "revert": {"reverting": "reverting"}},
    Trigger.EVENT_SENT: {"run": {"awaiting_external": "queued"}},
    Trigger.CLAIM: {"run": {"queued": "running"}, "revert": {"reverting": "reverting"}},
    Trigger.RELEASE: {"run": {"running": "queued"}, "revert": {"reverting": "reverting"}},
    Trigger.WORKER_LOST: {"run": {"running": "failed"}, "revert": {"reverting": "failed"}},
    Trigger.CANNOT_START_YET: {"run": {"queued": "queued"}},
    Trigger.CANNOT_START: {"run": {"queued": "failed"}},
    Trigger.DONE: {"run": {"running": "done"}, "revert": {"reverting": "reverted"}},
    Trigger.WAIT: {"run": {"running": "*"}},
    Trigger.WAIT_FOR_CHILDREN: {
        "run": {"running": "awaiting_external"},
        "revert": {"reverting": "reverting"},
    },
    Trigger.WAIT_FOR_EVENT: {"run": {"running": "awaiting_external"}},
    Trigger.ASK: {"run": {"running": "needs_user"}},
    Trigger.RETRY_LATER: {"run": {"running": "queued"}, "revert": {"reverting": "reverting"}},
    Trigger.CANCELLED: {"run": {"running": "cancelled"}},
    Trigger.PAUSED: {"run": {"running": "paused"}},
    Trigger.RETRY_AFTER_ERROR: {"run": {"running": "queued"}},
    Trigger.FAIL: {"run": {"running": "failed"}, "revert": {"reverting": "failed"}},
}


def expected_target(trigger: Trigger, phase: str, status: str) -> str | None:
    for sources, target in EXPECTED[trigger].get(phase, {}).items():
        if status in sources.split():
            return target
    return None


def test_every_event_is_expected():
    assert set(EXPECTED) == set(Trigger)


def test_each_status_phase_and_event():
    wrong = []
    for trigger, phase, status in itertools.product(Trigger, Phase, Status):
        target = expected_target(trigger, phase, status)
        if allows(trigger, phase, status) is not (target is not None):
            wrong.append(f"{trigger} from {status} ({phase}): expected {target or 'refused'}")
            continue
        if target is None:
            with pytest.raises(NotAllowed):
                transition(trigger, phase, status)
            continue
        found = {str(each) for each in transition(trigger, phase, status).targets}
        if found != (set(EXTERNAL.split()) if target == "*" else {target}):
            wrong.append(f"{trigger} from {status} ({phase}) leads to {sorted(found)}, expected {target}")
    assert not wrong, "\n".join(wrong)


NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_values_resolve_now_and_given_and_leave_row_markers():
    values = transition(Trigger.RETRY_AFTER_ERROR, "run").values(
        NOW, next_run_at=NOW, error="boom", error_code="transient"
    )
    assert values == {
        "status": "queued",
        "next_run_at": NOW,
        "error": "boom",
        "error_code": "transient",
        "wait_checks": None,
    }
    assert transition(Trigger.CLAIM, "run").values(NOW)["attempt"] is ATTEMPT_COUNTED
    assert transition(Trigger.RETRY, "run").values(NOW)["max_attempts"] is ONE_MORE_TRY
    assert (
        transition(Trigger.ASK, "run").values(
            NOW, user_message="?", actions=None, next_run_at=None, on_deadline=""
        )["attempt"]
        is ATTEMPT_GIVEN_BACK
    )


def test_values_want_exactly_the_given_fields():
    with pytest.raises(TypeError, match="error"):
        transition(Trigger.FAIL, "run").values(NOW, error_code="failed")
    with pytest.raises(TypeError, match="surprise"):
        transition(Trigger.PAUSE, "run").values(NOW, surprise=1)


def test_a_wait_leads_only_to_a_status_a_run_may_wait_in():
    wait = transition(Trigger.WAIT, "run")
    given = dict(wait_reason="later", eta_at=None, next_run_at=None, wait_checks=None)
    assert wait.values(NOW, status="not_ready", **given)["status"] == "not_ready"
    with pytest.raises(ValueError, match="needs_user"):
        wait.values(NOW, status="needs_user", **given)


def test_what_fields_go_together():
    """The fields an trigger sets in one write, where forgetting one would show a wrong state."""
    done = transition(Trigger.DONE, "run").fields
    assert (done["progress"], done["next_run_at"], done["cancel_requested"], done["error"]) == (
        100,
        None,
        False,
        "",
    )
    assert transition(Trigger.REVERT, "run").fields["phase"] == "revert"
    assert transition(Trigger.RETRY, "revert").fields["worker_losses"] == 0
    assert transition(Trigger.RELEASE, "revert").fields.get("attempt") is None  # a revert counts no tries
    assert transition(Trigger.WORKER_LOST, "run").fields["error_code"] == "worker_lost"
    assert transition(Trigger.CANCEL, "run").fields["waits_for_children"] is False


def test_the_event_a_job_waited_for_is_kept_only_until_its_run_is_re_entered():
    """A run re-entered with ``waits_for_event`` still set tells by it that its wait timed out. So
    a timed wake leaves it, and so does what happens to that run before it gets back to the wait
    (a release, a retry later); every other way out of the wait, and every other wait, clears it."""
    keeps = {
        (entry.trigger, entry.phase)
        for entry in transitions.TRANSITIONS.values()
        if "waits_for_event" not in entry.fields
    }
    assert {(trigger, phase) for trigger, phase in keeps if phase == "run"} == {
        (Trigger.WAKE, "run"),
        (Trigger.CLAIM, "run"),
        (Trigger.RELEASE, "run"),
        (Trigger.RETRY_LATER, "run"),
        (Trigger.RETRY_AFTER_ERROR, "run"),
        (Trigger.CANNOT_START_YET, "run"),
        (Trigger.REQUEST_CANCEL, "run"),
        (Trigger.REQUEST_PAUSE, "run"),
        (Trigger.CHILDREN_SETTLED, "run"),
    }
    assert transitions.TRANSITIONS[Trigger.WAIT_FOR_EVENT, Phase.RUN].fields["waits_for_event"] is GIVEN
    for trigger in (
        Trigger.RESUME,
        Trigger.PAUSE,
        Trigger.CANCEL,
        Trigger.EVENT_SENT,
        Trigger.DONE,
        Trigger.WAIT,
    ):
        assert transition(trigger, "run").fields["waits_for_event"] == "", trigger


@pytest.mark.parametrize("phase", ["run", "revert"])
def test_a_release_keeps_the_job_s_place_until_it_runs_again(phase):
    """A release leaves the time the job was first due as it is and marks it interrupted (the claim
    orders interrupted work first); the claim that takes it again clears the mark."""
    released = transition(Trigger.RELEASE, phase).values(NOW)
    assert "next_run_at" not in released
    assert (released["interrupted"], released["wait_reason"]) == (True, "")
    assert transition(Trigger.CLAIM, phase).values(NOW)["interrupted"] is False


def test_only_a_release_moves_work_up():
    """Every other way back to the queue keeps its time and its place behind interrupted work; an
    operator's pause or cancel of an interrupted job ends its place."""
    marking = {
        (entry.trigger, entry.phase)
        for entry in transitions.TRANSITIONS.values()
        if entry.fields.get("interrupted")
    }
    assert marking == {(Trigger.RELEASE, Phase.RUN), (Trigger.RELEASE, Phase.REVERT)}
    for trigger in (Trigger.PAUSE, Trigger.CANCEL):
        assert transition(trigger, "run", Status.QUEUED).fields["interrupted"] is False


def test_the_claim_and_the_release_are_the_table_s():
    assert transitions.DUE_STATUSES == {Status.QUEUED, Status.REVERTING}
    assert transitions.HELD_STATUSES == {Status.RUNNING, Status.REVERTING}


def test_refusals_name_the_statuses_allowed():
    assert transitions.described(Trigger.RETRY) == "failed or needs_user"
    assert transitions.described(Trigger.REQUEST_CANCEL) == "running"


CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


def test_the_diagram_in_the_docs_is_the_table_s():
    text = CONCEPTS.read_text()
    found = re.search(r"<!-- transitions: .*? -->\n(.*?)<!-- end of transitions -->", text, re.S)
    assert found, "docs/concepts.md has no generated transitions section"
    assert found.group(1).strip() == transitions.diagram().strip(), (
        "docs/concepts.md is out of date: paste django_durajobs.transitions.diagram() between its markers"
    )
