"""The oracle: one judgement of every scenario, from the effects ledger and the job rows.

``judge()`` returns the violations (empty when every promise held):

- no job lost: every job is terminal (``done``) when the scenario ends;
- no finished step started again, and the extra starts of a step in flight no more than the kills
  that hit it: every start of a step but its last was made by a worker that was killed (or was cut
  short by a database outage before the next start), each killed worker at most once;
- exactly one effect for ``atomic`` steps;
- no write accepted from a superseded lease: each stored checkpoint names the worker and try of
  the step's last start;
- concurrency limits never exceeded: a run counts from its ``enter`` to its ``leave``, a killed
  worker's run until the kill.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise

from django_durajobs import Job, JobStep, Status
from tests.proving.ledger import Entry
from tests.testapp.kinds_proving import ATOMIC_KINDS
from tests.testapp.models import SideEffect


def pid_of(worker_id: str) -> int:
    """The process id inside a worker id (``[NAME@]host:pid:random``)."""
    return int(worker_id.rsplit("@", 1)[-1].split(":")[1])


def judge(
    ledger: list[Entry],
    job_ids: Iterable[int],
    kills: dict[int, float],
    limit: int | None = None,
    outages: Sequence[tuple[float, float]] = (),
) -> list[str]:
    """Every violation of the promises by the jobs ``job_ids``; ``kills`` maps a killed pid to when,
    ``outages`` are the spans (from, to) the database was down (a step in flight then may start again)."""
    job_ids = set(job_ids)
    return [
        *_lost(job_ids),
        *_restarted(ledger, kills, outages),
        *_atomic_effects(job_ids),
        *_superseded_writes(ledger, job_ids),
        *(_over_limit(ledger, job_ids, kills, limit) if limit else []),
    ]


def _lost(job_ids: set[int]) -> list[str]:
    unfinished = Job.objects.filter(pk__in=job_ids).exclude(status=Status.DONE)
    return [f"job {pk} lost: {status}" for pk, status in unfinished.values_list("pk", "status")]


def _starts_by_step(ledger: list[Entry]) -> dict[tuple[int, str], list[Entry]]:
    starts = defaultdict(list)
    for entry in ledger:
        if entry.event == "start":
            starts[entry.job, entry.step].append(entry)
    return starts


def _restarted(
    ledger: list[Entry], kills: dict[int, float], outages: Sequence[tuple[float, float]]
) -> list[str]:
    violations = []
    for (job_id, step), starts in _starts_by_step(ledger).items():
        cut_short = [pid_of(entry.worker) for entry in starts[:-1]]
        by_outage = [
            any(down < again.at and up > start.at for down, up in outages)
            for start, again in pairwise(starts)
        ]
        if any(pid not in kills and not outage for pid, outage in zip(cut_short, by_outage, strict=True)):
            violations.append(f"job {job_id} step {step} started again after a live worker ran it")
        if len(set(cut_short)) != len(cut_short):
            violations.append(f"job {job_id} step {step} started twice by one killed worker")
    return violations


def _atomic_effects(job_ids: set[int]) -> list[str]:
    with_atomic_step = Job.objects.filter(pk__in=job_ids, kind__in=ATOMIC_KINDS).values_list("pk", flat=True)
    names = [f"atomic:{pk}" for pk in with_atomic_step]
    counts: dict[str, int] = defaultdict(int)
    for name in SideEffect.objects.filter(name__in=names).values_list("name", flat=True):
        counts[name] += 1
    return [f"{name}: {counts[name]} effects of an atomic step" for name in names if counts[name] != 1]


def _superseded_writes(ledger: list[Entry], job_ids: set[int]) -> list[str]:
    last_start = {key: starts[-1] for key, starts in _starts_by_step(ledger).items()}
    violations = []
    rows = JobStep.objects.filter(job_id__in=job_ids, state="done").values_list("job_id", "step_id", "result")
    for job_id, step, result in rows:
        last = last_start.get((job_id, step))
        if last is None or not isinstance(result, dict):
            continue
        if (result.get("worker"), result.get("attempt")) != (last.worker, last.attempt):
            violations.append(f"job {job_id} step {step}: checkpoint written by {result} not by its last run")
    return violations


def _over_limit(ledger: list[Entry], job_ids: set[int], kills: dict[int, float], limit: int) -> list[str]:
    """At most ``limit`` runs of one concurrency key at once (the key is the job's ``subject["key"]``)."""
    subjects = Job.objects.filter(pk__in=job_ids).values_list("pk", "subject")
    keys = {pk: subject["key"] for pk, subject in subjects if isinstance(subject, dict) and "key" in subject}
    changes: list[tuple[float, int, object]] = []
    opened: dict[tuple[int, str], Entry] = {}
    for entry in ledger:
        if entry.job not in keys or entry.event not in ("enter", "leave"):
            continue
        if entry.event == "enter":
            opened[entry.job, entry.worker] = entry
            changes.append((entry.at, 1, keys[entry.job]))
        elif opened.pop((entry.job, entry.worker), None):
            changes.append((entry.at, -1, keys[entry.job]))
    for job_id, worker in opened:
        changes.append((kills.get(pid_of(worker), float("inf")), -1, keys[job_id]))
    running: dict[object, int] = defaultdict(int)
    violations = []
    for at, delta, key in sorted(changes, key=lambda change: (change[0], change[1])):
        running[key] += delta
        if running[key] > limit:
            violations.append(f"concurrency key {key}: {running[key]} running at {at:.3f}, limit {limit}")
    return violations
