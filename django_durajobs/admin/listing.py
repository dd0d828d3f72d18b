"""How the job list counts: never all the jobs that match, at most ``COUNT_CAP`` and one more.

Django's admin counts every row that matches the filters to number its pages, a scan of a million
rows on a busy table. The job list counts up to ``COUNT_CAP`` (one ``COUNT(*)`` over a ``LIMIT``ed
subquery, which stops there) and, beyond, says "More than 10,000 jobs" with its pages up to the
cap's: narrow the list (a filter, a search) or sort it the other way for the older ones.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property

#: The most jobs the list counts; more read "More than 10,000 jobs".
COUNT_CAP = 10_000


class CappedPaginator(Paginator):
    """A paginator that counts at most ``cap`` objects; ``capped`` says whether there are more."""

    cap = COUNT_CAP

    @cached_property
    def counted(self) -> int:
        """The objects, up to ``cap + 1``."""
        object_list: Any = self.object_list
        if isinstance(object_list, QuerySet):  # no order: the cheapest plan that stops at the cap
            return object_list.order_by()[: self.cap + 1].count()
        return min(len(object_list), self.cap + 1)

    @cached_property
    def capped(self) -> bool:
        return self.counted > self.cap

    @cached_property
    def count(self) -> int:
        return min(self.counted, self.cap)
