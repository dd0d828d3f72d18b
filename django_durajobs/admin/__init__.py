"""The Django admin as the operator's console: every job, its steps and log, and the operations.

Thin glue over the engine: what may be done comes from the operations in ``ops``; the admin
checks permissions, calls them, and records who did what in Django's admin history. One module
per concern: ``jobs`` (the list and the page's fields), ``pages`` (the job page and its views),
``sections`` (the page's bounded steps, log and children), ``actions`` (actions on selected
jobs, however many), ``display`` (badges, JSON, the operations' buttons), ``schedules`` (the
schedule list), ``events`` (the sent events; sending one), ``dashboard_entry`` (the dashboard's
link on the admin's index), ``explain`` (what each operation will do, in words).
"""

from .dashboard_entry import JobsDashboardAdmin
from .events import EventAdmin
from .jobs import JobAdmin
from .schedules import ScheduleAdmin

__all__ = ["EventAdmin", "JobAdmin", "JobsDashboardAdmin", "ScheduleAdmin"]
