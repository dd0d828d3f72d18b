"""No-op kinds: what is measured is the queue's own work per job and per step, nothing else."""

from django_durajobs import job

FIVE_STEPS = ("a", "b", "c", "d", "e")


@job("bench_noop0", title="No-op, no steps")
def noop0(job, ctx):
    return None


@job("bench_noop1", title="No-op, 1 step", steps=["a"])
def noop1(job, ctx):
    ctx.step("a", lambda: None)


@job("bench_noop5", title="No-op, 5 steps", steps=FIVE_STEPS)
def noop5(job, ctx):
    for step_id in FIVE_STEPS:
        ctx.step(step_id, lambda: None)


@job("bench_fair", title="No-op, fair shares by tenant", fairness_key=lambda subject: subject["tenant"])
def fair(job, ctx):
    return None


@job("bench_unfair", title="No-op, the same without fair shares")
def unfair(job, ctx):
    return None


@job("bench_parent", title="Waits for its children")
def parent(job, ctx):
    ctx.wait_for_children()


@job("bench_keyed", title="No-op, one at a time per key", concurrency_key=lambda subject: subject["key"])
def keyed(job, ctx):
    return None


@job("bench_scheduled", title="No-op, enqueued by a schedule")
def scheduled(job, ctx):
    return None
