"""An access policy of the kind docs/end-users.md shows: a user sees the jobs of their team
(``group_id`` is ``team-<username>``) and acts on none."""

from django_durajobs.access import AccessPolicy


class TeamPolicy(AccessPolicy):
    def visible(self, request, jobs):
        return jobs.filter(group_id=f"team-{request.user.username}")

    def may(self, request, job, act):
        return False
