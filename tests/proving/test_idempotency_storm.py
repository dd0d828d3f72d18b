"""Scenario 4, the idempotency storm: many processes and threads enqueue the same keys at once,
some of the first enqueuers rolling their transactions back. One job per key, every caller that
kept its call gets that job's id, and no exception (no ``IntegrityError``) reaches a caller.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

from django_durajobs import Job
from tests.helpers import log_of, wait_for

#: (processes, threads each, keys), short and full; the full run is 64 enqueuers x 1,000 keys.
SIZES = {True: (4, 4, 100), False: (8, 8, 1000)}


def test_idempotency_storm(child_env, spawn, tmp_path, short, report):
    processes, threads, keys = SIZES[short]
    go = tmp_path / "go"
    outs = [tmp_path / f"storm-{n}.jsonl" for n in range(processes)]
    storm = [
        spawn("tests.proving.storm", str(out), str(go), str(keys), str(threads), str(n), env=child_env)
        for n, out in enumerate(outs)
    ]
    wait_for(
        lambda: all(Path(f"{out}.ready").exists() for out in outs), timeout=120, message="the storm to set up"
    )
    began = time.monotonic()
    go.touch()
    for proc in storm:
        assert proc.wait(timeout=600) == 0, log_of(proc)
    elapsed = time.monotonic() - began

    outcomes = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    jobs = defaultdict(list)
    for pk, key in Job.objects.filter(idempotency_key__startswith="storm:").values_list(
        "pk", "idempotency_key"
    ):
        jobs[key].append(pk)
    violations = [f"{key}: {len(ids)} jobs" for key, ids in jobs.items() if len(ids) != 1]
    violations += [f"key {n} has no job" for n in range(keys) if f"storm:{n}" not in jobs]
    violations += [f"{o['key']} (kept={o['kept']}): {o['error']}" for o in outcomes if o["error"]]
    violations += [
        f"{o['key']}: a caller got {o['id']}, the key's job is {jobs[o['key']]}"
        for o in outcomes
        if o["kept"] and not o["error"] and [o["id"]] != jobs[o["key"]]
    ]
    report(
        jobs=len(jobs),
        kills=0,
        restarts=0,
        enqueuers=processes * threads,
        calls=len(outcomes),
        rolled_back=sum(not o["kept"] for o in outcomes),
        seconds=round(elapsed, 1),
        violations=len(violations),
    )
    assert len(outcomes) == processes * threads * keys
    assert violations == [], violations[:20]
