"""How far a job has got, as a percentage: its steps, unless it reports its own progress."""

from __future__ import annotations

from ..status import Status


def progress_of(status: str, reported: int, steps_done: int, steps_total: int) -> int:
    """The percentage a screen shows.

    A job that ended well (done, or reverted) is at 100. One that reports its own progress
    (``ctx.progress()``, ``update(progress=…)``: anything above 0) shows that. Otherwise its
    completed steps out of all its steps, in its phase: a revert counts its own steps, from 0.
    """
    if status in (Status.DONE, Status.REVERTED):
        return 100
    if reported > 0:
        return min(100, reported)
    if steps_total <= 0:
        return 0
    return min(100, steps_done * 100 // steps_total)
