"""``enqueue(..., debounce=(key, seconds))``: the last enqueue within the window wins, and the job
runs once, after the window has been quiet; a stream that never stops runs at ``debounce_max_wait``.

1,000 enqueues of one key from 8 threads over about 2 s make one job that runs once, with the
subject of the enqueue made last, on every database (the unique index settles the races).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection

from django_durajobs import Job, JobError, drain, enqueue, job
from django_durajobs.registry import unregister
from django_durajobs.testing import clock

THREADS = 8
EACH = 125  # 1,000 enqueues in all
QUIET = 30


@pytest.fixture
def runs():
    """The kind ``reindex``: each run records its subject."""
    ran: list[dict] = []

    @job("reindex")
    def reindex(job, ctx):
        ran.append(job.subject)

    yield ran
    unregister("reindex")


@pytest.mark.django_db(transaction=True)
def test_a_thousand_enqueues_from_eight_threads_make_one_run_with_the_last_subject(runs):
    errors: list[BaseException] = []

    def enqueue_many(thread: int) -> None:
        try:
            for n in range(EACH):
                enqueue("reindex", subject={"thread": thread, "n": n}, debounce=("product:7", QUIET))
                time.sleep(2 / EACH)
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=enqueue_many, args=(number,)) for number in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    last, created = enqueue("reindex", subject={"last": True}, debounce=("product:7", QUIET))
    assert not created

    [waiting] = Job.objects.filter(kind="reindex")
    assert waiting.pk == last.pk and waiting.subject == {"last": True}
    with clock() as now:
        assert drain() == 0  # the window is not quiet yet
        now.move_to(waiting.next_run_at)
        assert drain() == 1
    assert runs == [{"last": True}]
    assert Job.objects.filter(kind="reindex").count() == 1


@pytest.mark.django_db
def test_each_enqueue_pushes_the_run_back_until_the_maximum_wait(runs):
    with clock() as now:
        first, _ = enqueue("reindex", subject={"n": 0}, debounce=("k", 10), debounce_max_wait=25)
        assert first.next_run_at == now.now() + timedelta(seconds=10)
        for n in range(1, 4):
            now.move(8)
            moved, created = enqueue("reindex", subject={"n": n}, debounce=("k", 10), debounce_max_wait=25)
            assert (moved.pk, created) == (first.pk, False)
            assert drain() == 0
        first.refresh_from_db()
        assert first.next_run_at == first.created_at + timedelta(seconds=25)  # capped, not 24 + 10
        now.move_to(first.next_run_at)
        assert drain() == 1
        assert runs == [{"n": 3}]
        # The key's job has run: the next enqueue waits anew, in a job of its own.
        again, created = enqueue("reindex", subject={"n": 4}, debounce=("k", 10))
        assert created and again.pk != first.pk
        first.refresh_from_db()
        assert first.idempotency_key == f"debounce:reindex:k:{first.pk}"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "arguments",
    [
        {"debounce": "k"},
        {"debounce": ("", 5)},
        {"debounce": ("k", 0)},
        {"debounce": ("k", 10), "debounce_max_wait": 5},
        {"debounce": ("k", 10), "idempotency_key": "x"},
        {"debounce": ("k", 10), "run_at": timedelta(seconds=5)},
        {"debounce_max_wait": 5},
    ],
)
def test_a_bad_debounce_is_refused_and_writes_nothing(runs, arguments):
    with pytest.raises(JobError) as refused:
        enqueue("reindex", **arguments)
    assert refused.value.code == "invalid_input"
    assert not Job.objects.exists()
