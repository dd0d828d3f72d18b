"""The benchmark smoke run's check (``bench/run.py --check-targets``): a figure that misses half its
target fails it (half or twice what was measured, for a target not met yet), a figure short of the
target but within that margin does not (noise on a loaded machine), and figures without a target
or a ceiling are left alone."""

from __future__ import annotations

from bench.report import Figure
from bench.targets import AT_LEAST, AT_MOST, FLAT, FULL_RUN_AT_LEAST, NOT_MET_YET, missed_by_half


def rate(key: str, ratio: float | None) -> Figure:
    return Figure(key, key, 100.0, "jobs/s", None if ratio is None else 100.0 / ratio)


def latency(key: str, ratio: float) -> Figure:
    return Figure(key, key, ratio, "ms", 1.0)


def test_a_rate_below_half_its_target_is_missed():
    assert AT_LEAST["postgresql"]["process_0_c1"] == 1.0 and "process_0_c1" not in NOT_MET_YET["postgresql"]
    missed = missed_by_half("postgresql", [rate("process_0_c1", 0.45), rate("process_0_c1", 0.6)])
    assert missed == ["process_0_c1: 0.45× raw, below half the target of 1×"]


def test_a_latency_above_twice_its_target_is_missed():
    assert AT_MOST["postgresql"]["wakeup_p95"] == 3.0 and "wakeup_p95" not in NOT_MET_YET["postgresql"]
    figures = [latency("wakeup_p95", 6.5), latency("wakeup_p95", 5.9)]
    assert missed_by_half("postgresql", figures) == ["wakeup_p95: 6.50× raw, above twice the target of 3×"]


def test_a_rate_not_met_yet_is_held_to_half_what_was_measured():
    """SQLite's targets are not met (docs/performance.md): a path that got twice as slow still fails."""
    measured, least = NOT_MET_YET["sqlite"]["enqueue"], AT_LEAST["sqlite"]["enqueue"]
    figures = [rate("enqueue", measured / 2.5), rate("enqueue", measured / 1.5)]
    assert missed_by_half("sqlite", figures) == [
        f"enqueue: {measured / 2.5:.2f}× raw, below half the {measured:g}× measured "
        f"(the target, {least:g}×, is not met yet)"
    ]


def test_a_latency_not_met_yet_is_held_to_twice_what_was_measured():
    measured, most = NOT_MET_YET["postgresql"]["step_cost"], AT_MOST["postgresql"]["step_cost"]
    figures = [latency("step_cost", measured * 2.2), latency("step_cost", measured * 1.8)]
    assert missed_by_half("postgresql", figures) == [
        f"step_cost: {measured * 2.2:.2f}× raw, above twice the {measured:g}× measured "
        f"(the target, {most:g}×, is not met yet)"
    ]


def test_figures_without_a_target_or_a_ceiling_pass():
    figures = [rate("process_5_c4", 0.01), rate("enqueue_many", None), latency("claim_empty", 9.0)]
    assert missed_by_half("sqlite", figures) == []
    assert missed_by_half("mysql", [rate("process_0_c1", 0.01)]) == []


def test_a_rate_of_its_own_is_held_to_half_its_target_in_a_full_run_only():
    """Pruning has no raw ceiling: its rate itself is the target, on this machine, at full size."""
    least = FULL_RUN_AT_LEAST["postgresql"]["prune_large"]
    figures = [
        Figure("prune_large", "prune", least / 2.5, "jobs/s"),
        Figure("prune_large", "prune", least / 1.5, "jobs/s"),
    ]
    assert missed_by_half("postgresql", figures, quick=False) == [
        f"prune: {least / 2.5:,.0f} jobs/s, below half the target of {least:,.0f}"
    ]
    assert missed_by_half("postgresql", figures) == missed_by_half("sqlite", figures, quick=False) == []


def test_a_cost_that_grows_past_twice_its_flat_target_is_missed_on_every_database():
    """A claim among a backlog against the empty table's: no ceiling of raw SQL, its own small size."""
    assert FLAT["claim_backlog"] == 1.3

    def backlog(versus: float) -> Figure:
        return Figure("claim_backlog", "claim among a backlog", versus, "ms", None, versus, "the empty table")

    assert missed_by_half("mysql", [backlog(2.5)]) == []
    assert missed_by_half("sqlite", [backlog(2.7)]) == [
        "claim among a backlog: 2.70× the empty table, above twice the target of 1.3×"
    ]


def test_a_flat_cost_not_met_yet_on_one_database_is_held_to_twice_what_was_measured_there():
    """The claim under limits behind a full key's backlog: flat on PostgreSQL and SQLite, not yet on
    MariaDB/MySQL, where a path that got twice as slow again still fails."""
    key = "claim_limited_past_held_back"
    measured = NOT_MET_YET["mysql"][key]

    def look(versus: float) -> Figure:
        return Figure(
            key, "the claim under limits", versus, "ms", None, versus, "the same claim behind 1,000"
        )

    assert missed_by_half("mysql", [look(measured * 1.9)]) == []
    assert missed_by_half("mysql", [look(measured * 2.1)]) != []
    assert missed_by_half("postgresql", [look(FLAT[key] * 2.1)]) != []
