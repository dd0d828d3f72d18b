"""How limits are written: a rate such as ``"10/m"``, and a limit on how many jobs run at once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

#: The seconds of each period a rate may count its starts in.
PERIODS = {"s": 1, "m": 60, "h": 3600}
_RATE = re.compile(r"\s*([0-9]+)\s*/\s*([smh])\s*", re.ASCII)
#: The most starts a rate may allow per period: each start of the last period is kept, to count them.
MAX_RATE_STARTS = 10_000
#: The most jobs a limit may let run at once (more is no limit at all on any fleet).
MAX_RUNNING_LIMIT = 1_000_000


def limit_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a limit on how many jobs run at once (the rest of a sentence), or None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RUNNING_LIMIT:
        return f"must be an integer from 1 to {MAX_RUNNING_LIMIT:,}, not {value!r:.40}."
    return None


@dataclass(frozen=True)
class RateLimit:
    """At most ``starts`` starts of a kind in any ``seconds`` (a sliding window), across the fleet."""

    starts: int
    seconds: int
    text: str

    @classmethod
    def parse(cls, text: Any) -> RateLimit:
        """``"10/s"``, ``"100/m"`` or ``"1000/h"``; ``ValueError`` for anything else."""
        match = _RATE.fullmatch(text) if isinstance(text, str) else None
        starts = int(match[1]) if match else 0
        if not match or not 1 <= starts <= MAX_RATE_STARTS:
            raise ValueError(
                f"rate_limit must be starts per period, as '10/s', '100/m' or '1000/h' "
                f"(1 to {MAX_RATE_STARTS:,} starts), not {text!r:.40}."
            )
        return cls(starts, PERIODS[match[2]], f"{starts}/{match[2]}")

    def __str__(self) -> str:
        return self.text
