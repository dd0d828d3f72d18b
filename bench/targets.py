"""The targets of issue 27 as ratios to the raw ceiling of the same run, and the check a smoke run
makes (``run.py --check-targets``): a figure that misses half its target is a broken path, not
noise. A workload whose figure misses runs once more, and only a second miss counts.

Jobs with steps are compared with the raw *durable* loop (a checkpoint insert per step).
"""

from __future__ import annotations

from bench.report import Figure

#: Per database: figure key -> the least ratio to raw (rates: higher is better).
AT_LEAST = {
    "postgresql": {
        "process_0_c1": 1.0,
        "process_1_c1": 0.9,
        "process_5_c1": 0.9,
        "enqueue": 0.8,
        "enqueue_many": 1.0,
    },
    "sqlite": {
        "process_0_c1": 0.8,
        "process_1_c1": 0.6,
        "process_5_c1": 0.5,
        "enqueue": 0.5,
        "enqueue_many": 0.3,
    },
    "mysql": {"enqueue_many": 0.5},
}
#: Per database: figure key -> the largest ratio to raw (latencies: lower is better).
AT_MOST = {
    "postgresql": {"wakeup_p50": 1.3, "wakeup_p95": 3.0, "step_cost": 1.1},
}
#: Targets not met yet (docs/performance.md says why): figure key -> the ratio a quick run measured
#: when this was written. Until a target is met, the check holds the figure to half of this.
NOT_MET_YET = {
    "sqlite": {
        "process_0_c1": 0.29,
        "process_1_c1": 0.23,
        "process_5_c1": 0.20,
        "enqueue": 0.18,
        "enqueue_many": 0.05,
    },
}


def missed_by_half(vendor: str, figures: list[Figure]) -> list[str]:
    """What each figure that misses half its target on ``vendor`` measured, and the target."""
    missed = []
    for figure in figures:
        ratio = figure.ratio
        if ratio is None:
            continue
        least = AT_LEAST.get(vendor, {}).get(figure.key)
        measured = NOT_MET_YET.get(vendor, {}).get(figure.key)
        if least is not None and measured is not None and measured < least:
            if ratio < measured / 2:
                missed.append(
                    f"{figure.label}: {ratio:.2f}× raw, below half the {measured:g}× measured "
                    f"(the target, {least:g}×, is not met yet)"
                )
        elif least is not None and ratio < least / 2:
            missed.append(f"{figure.label}: {ratio:.2f}× raw, below half the target of {least:g}×")
        most = AT_MOST.get(vendor, {}).get(figure.key)
        if most is not None and ratio > most * 2:
            missed.append(f"{figure.label}: {ratio:.2f}× raw, above twice the target of {most:g}×")
    return missed
