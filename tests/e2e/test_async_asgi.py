"""The async operations from a real ASGI application: uvicorn serves ``tests/asgi.py``, whose
async views (``tests/async_views.py``) call ``await aenqueue()``, ``await adescribe()`` and
``await acancel()``; a ``runjobs`` worker runs what they enqueue."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from django_durajobs import Job, Status
from tests.helpers import fail_if_exited, log_of, stop_cleanly, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Client:
    def __init__(self, port: int) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}/async"

    def call(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.base}{path}", data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())


@pytest.fixture
def asgi(spawn, child_env):
    """uvicorn serving the test project, once it answers."""
    port = free_port()
    server = spawn(
        "uvicorn", "tests.asgi:application", "--host", "127.0.0.1", "--port", str(port), env=child_env
    )

    def answers() -> bool:
        fail_if_exited([server])
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    wait_for(answers, timeout=60, message="uvicorn to answer")
    yield Client(port)
    assert "Traceback" not in log_of(server), log_of(server)


def test_async_views_enqueue_show_and_cancel_jobs_that_a_worker_runs(asgi, runjobs, child_env):
    status, created = asgi.call("POST", "/jobs/", {"kind": "async_three_steps"})
    assert status == 201 and created["created"] is True
    status, asking = asgi.call("POST", "/jobs/", {"kind": "async_question", "subject": {"release": 7}})
    assert status == 201
    assert Job.objects.get(pk=asking["id"]).subject == {"release": 7}

    worker = runjobs("--concurrency", "2", "--poll-interval", "0.1", env=child_env)

    def shown_once(job_id: int, status: str) -> dict | None:
        """The job's ``describe()`` as the view shows it, once it is in ``status``."""
        fail_if_exited([worker])
        code, summary = asgi.call("GET", f"/jobs/{job_id}/")
        assert code == 200
        return summary if summary["status"] == status else None

    done = wait_for(lambda: shown_once(created["id"], Status.DONE), timeout=60)
    assert [step["id"] for step in done["completed_steps"]] == ["fetch", "transform", "store"]
    asked = wait_for(lambda: shown_once(asking["id"], Status.NEEDS_USER), timeout=60)
    assert (asked["user_message"], asked["can_cancel"]) == ("Ship the release?", True)

    assert asgi.call("POST", f"/jobs/{asking['id']}/cancel/") == (
        200,
        {"id": asking["id"], "status": Status.CANCELLED},
    )
    status, refused = asgi.call("POST", f"/jobs/{asking['id']}/cancel/")
    assert (status, refused["code"]) == (409, "job_not_cancellable")
    assert Job.objects.get(pk=asking["id"]).status == Status.CANCELLED
    stop_cleanly([worker])


def test_async_views_refuse_what_the_operations_refuse(asgi):
    status, refused = asgi.call("POST", "/jobs/", {"kind": "no_such_kind"})
    assert (status, refused["code"]) == (400, "unknown_job_kind")
    status, refused = asgi.call("GET", "/jobs/987654321/")
    assert (status, refused["code"]) == (404, "job_not_found")
    assert not Job.objects.exists()
