"""The rules about parents and their children (``family.py``), for each mix of child outcomes,
against expectations written out here; and, read from the package's source with ``ast``, that no
other module writes one of the family's status sets out again. No database."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from django_durajobs import family
from django_durajobs.status import Status
from tests.engine.test_layers import PACKAGE_DIR, package_modules

# A mix of child outcomes -> what a parent waiting for them in its run becomes (None: it waits on),
# and how the family reads.
MIXES = [
    ({}, "queued", "none"),
    ({"done": 3}, "queued", "done"),
    ({"done": 2, "failed": 1}, "queued", "partial"),
    ({"done": 1, "needs_user": 1}, "queued", "partial"),
    ({"done": 1, "cancelled": 1, "reverted": 1}, "queued", "partial"),
    ({"failed": 2}, "queued", "failed"),
    ({"failed": 1, "needs_user": 1, "cancelled": 1, "reverted": 1}, "queued", "failed"),
    ({"done": 2, "running": 1}, None, "running"),
    ({"failed": 1, "queued": 1}, None, "running"),
    ({"done": 1, "paused": 1}, None, "running"),
    ({"done": 1, "awaiting_external": 1}, None, "running"),
    ({"failed": 1, "reverting": 1}, None, "running"),
    ({"awaiting_approval": 1, "not_ready": 1, "needs_setup": 1, "awaiting_payment": 1}, None, "running"),
]


@pytest.mark.parametrize(("counts", "becomes", "reads"), MIXES, ids=[repr(mix[0]) for mix in MIXES])
def test_a_parent_waiting_in_its_run_is_queued_once_no_child_is_open_whatever_their_outcomes(
    counts, becomes, reads
):
    woken = family.parent_woken("run", "awaiting_external", counts)

    assert (woken.target if woken else None) == becomes
    assert family.overall(counts) == reads


@pytest.mark.parametrize(("counts", "becomes", "_reads"), MIXES, ids=[repr(mix[0]) for mix in MIXES])
def test_a_parent_waiting_in_its_revert_goes_on_reverting_once_no_child_is_open(counts, becomes, _reads):
    woken = family.parent_woken("revert", "reverting", counts)

    assert (woken.target if woken else None) == ("reverting" if becomes else None)


def test_a_woken_parent_waits_for_children_no_more_and_is_due_now():
    woken = family.parent_woken("run", "awaiting_external", {"done": 1})

    assert {name: woken.fields[name] for name in ("waits_for_children", "wait_reason", "eta_at")} == {
        "waits_for_children": False,
        "wait_reason": "",
        "eta_at": None,
    }


@pytest.mark.parametrize("status", ["queued", "paused", "cancelled", "needs_user", "failed"])
def test_a_parent_no_longer_waiting_in_awaiting_external_is_not_woken_by_its_children(status):
    assert family.parent_woken("run", status, {"done": 2}) is None


def test_the_settled_statuses_are_the_ended_ones_and_a_question_nobody_answered():
    open_by_status = {status.value: family.still_open({status.value: 1}) for status in Status}

    assert {status for status, still_open in open_by_status.items() if not still_open} == {
        "done",
        "failed",
        "needs_user",
        "cancelled",
        "reverted",
    }
    assert family.still_open({"done": 4, "failed": 2, "running": 3, "queued": 1}) == 4
    # What a lookup of a parent's open children names: every status but the settled ones.
    assert family.OPEN == {status for status, still_open in open_by_status.items() if still_open}


def test_a_retry_of_the_failed_children_queues_those_failed_or_asking_again():
    assert family.RETRIED == {"failed", "needs_user"}
    assert family.retried({"failed": 2, "needs_user": 1, "done": 5, "cancelled": 1}) == 3
    assert family.retried({}) == 0


def test_a_cancel_takes_along_the_children_that_have_not_ended_and_a_revert_the_done_ones():
    assert {"done", "failed", "cancelled", "reverted"}.isdisjoint(family.CANCELLED_WITH_PARENT)
    assert family.CANCELLED_WITH_PARENT == {
        "queued",
        "running",
        "paused",
        "awaiting_external",
        "needs_user",
        "awaiting_approval",
        "awaiting_payment",
        "not_ready",
        "needs_setup",
        "reverting",
    }
    assert family.REVERTED_WITH_PARENT == {"done"}


def test_what_a_waiting_parent_says_and_logs_once_woken():
    assert family.wait_reason(2, 5) == "Waiting for 2 of 5 child jobs"
    assert family.wait_reason(1, 1) == "Waiting for 1 of 1 child job"
    assert family.settled_line("run", 3) == "All 3 child jobs have settled; queued again."
    assert family.settled_line("revert", 1) == "The 1 child job has settled; its revert goes on."


def test_a_parent_waiting_for_its_children_shows_them_as_counted_not_as_it_parked():
    parked = SimpleNamespace(waits_for_children=True, wait_reason="Waiting for 4 of 4 child jobs")
    assert family.shown_wait_reason(parked, {"done": 3, "running": 1}) == "Waiting for 1 of 4 child jobs"
    assert family.shown_wait_reason(parked, None) == "Waiting for 4 of 4 child jobs"  # not counted
    other = SimpleNamespace(waits_for_children=False, wait_reason="DNS record not visible")
    assert family.shown_wait_reason(other, {"done": 3, "running": 1}) == "DNS record not visible"


# No status set of the family's written out again elsewhere ---------------------------------------

#: The modules that may name the family's statuses one by one: the rules themselves, and the
#: status and transitions modules they are made of.
RULE_MODULES = {"family", "status", "transitions"}
#: The family's sets another module could write out again (a set of one status says too little).
FAMILY_SETS = {
    name: frozenset(str(status) for status in getattr(family, name))
    for name in ("SETTLED", "OPEN", "SETTLED_UNSUCCESSFULLY", "RETRIED", "CANCELLED_WITH_PARENT")
}
STATUS_VALUES = {status.value for status in Status}


def _status_of(node: ast.expr) -> str | None:
    """The status a node names: ``Status.FAILED`` or ``"failed"``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Status":
        return Status[node.attr].value if node.attr in Status.__members__ else None
    if isinstance(node, ast.Constant) and node.value in STATUS_VALUES:
        return node.value
    return None


def restated_sets(source: str) -> list[str]:
    """Each collection of statuses, or ``sources(Trigger.RETRY)``, in ``source`` that is one of the
    family's sets: ``"line 12: RETRIED"``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Set | ast.List | ast.Tuple) and len(node.elts) > 1:
            statuses = [_status_of(element) for element in node.elts]
            if None in statuses:
                continue
            named = frozenset(status for status in statuses if status)
            found += [f"line {node.lineno}: {name}" for name, kept in FAMILY_SETS.items() if kept == named]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "sources"
            and ast.unparse(node.args) == "Trigger.RETRY"
        ):
            found.append(f"line {node.lineno}: RETRIED")
    return found


def family_sets_restated(package_dir: Path = PACKAGE_DIR) -> list[str]:
    return [
        f"{name} {where}"
        for name, path in package_modules(package_dir).items()
        if name not in RULE_MODULES and "migrations" not in name
        for where in restated_sets(path.read_text())
    ]


def test_no_module_but_the_family_rules_writes_a_family_status_set_out_again():
    restated = family_sets_restated()
    assert not restated, "Ask family.py instead:\n" + "\n".join(restated)


def test_a_family_status_set_planted_in_a_copy_of_the_package_is_found(tmp_path):
    copy = tmp_path / "django_durajobs"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("locale", "static", "templates"))
    with (copy / "admin" / "sections.py").open("a") as sections:
        sections.write("\n\nNEEDS_SOMEONE = (Status.FAILED, Status.NEEDS_USER)\n")
    with (copy / "engine" / "describe.py").open("a") as describe:
        describe.write('\n\nUNSUCCESSFUL = {"failed", "needs_user", "cancelled", "reverted"}\n')
    with (copy / "ops" / "many.py").open("a") as many:
        many.write("\n\nRETRIED_CHILDREN = tuple(sorted(sources(Trigger.RETRY)))\n")

    restated = [
        problem.split(" line")[0] + " " + problem.split(": ")[1] for problem in family_sets_restated(copy)
    ]

    assert restated == [
        "admin.sections RETRIED",
        "engine.describe SETTLED_UNSUCCESSFULLY",
        "ops.many RETRIED",
    ]
