"""Which workloads a benchmark run picks: the fleet (minutes of many worker processes) only when
named, so that CI's smoke run (``--quick``, nothing named) stays seconds long."""

from __future__ import annotations

from bench.run import chosen
from bench.workloads import WHEN_NAMED, WORKLOADS


def names(workloads) -> list[str]:
    return [workload.__name__ for workload in workloads]


def test_a_run_that_names_nothing_leaves_out_the_fleet():
    picked = names(chosen(WORKLOADS, [], WHEN_NAMED))
    assert "fleet" not in picked
    assert picked == [name for name in names(WORKLOADS) if name != "fleet"]


def test_a_named_workload_runs_alone_the_fleet_too():
    assert names(chosen(WORKLOADS, ["fleet"], WHEN_NAMED)) == ["fleet"]
    assert names(chosen(WORKLOADS, ["wake_up", "fleet"], WHEN_NAMED)) == ["wake_up", "fleet"]
