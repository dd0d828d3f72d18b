"""The database router that puts the app's rows in a jobs database of its own.

A project that sets ``DURAJOBS["DATABASE"]`` adds it to ``DATABASE_ROUTERS``::

    DATABASE_ROUTERS = ["django_durajobs.routers.JobsRouter"]
"""

from __future__ import annotations

from typing import Any

from django.db import DEFAULT_DB_ALIAS, models, router

from .conf import jobs_database

APP_LABEL = "django_durajobs"


def _ours(model: type[models.Model] | models.Model | None) -> bool:
    return model is not None and model._meta.app_label == APP_LABEL


class JobsRouter:
    """Reads and writes of the app's models go to the jobs database, and their tables are made
    there only; a model of another app reached from a job (its creator) stays where it lives."""

    def db_for_read(self, model: type[models.Model], **hints: Any) -> str | None:
        return self._place(model, hints)

    def db_for_write(self, model: type[models.Model], **hints: Any) -> str | None:
        return self._place(model, hints)

    def allow_relation(self, obj1: models.Model, obj2: models.Model, **hints: Any) -> bool | None:
        return True if _ours(obj1) or _ours(obj2) else None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        jobs = jobs_database()
        if app_label == APP_LABEL:
            return db == jobs
        if db == jobs != DEFAULT_DB_ALIAS:
            return False  # a jobs database of its own holds the jobs only
        return None

    @staticmethod
    def _place(model: type[models.Model], hints: dict[str, Any]) -> str | None:
        if _ours(model):
            return jobs_database()
        if _ours(hints.get("instance")):  # a job's creator: where the other routers put users
            return router.db_for_read(model)
        return None


def creator_deleted(collector: Any, field: Any, sub_objs: Any, using: str) -> None:
    """``on_delete`` of ``Job.created_by``: a deleted user's jobs keep running, created by nobody.

    As ``SET_NULL``, and on the jobs database when it is not the user's: Django's collector looks
    for related rows in the database of what it deletes, and finds no job table there.
    """
    if using == jobs_database():
        models.SET_NULL(collector, field, sub_objs, using)
    else:
        sub_objs.using(jobs_database()).update(**{field.name: None})


creator_deleted.lazy_sub_objs = True  # type: ignore[attr-defined]  # handed the query, not its rows
