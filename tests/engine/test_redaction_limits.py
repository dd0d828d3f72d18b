"""Redaction never stalls a worker: its time is linear in the text, text with a limit is cut
before it is redacted, caches keep only short texts, and the package's own log records are
redacted and bounded. A real worker beside such a failure is in
``tests/e2e/test_redaction_worker.py``.

Times are CPU times of this process, the best of a few runs, against the generous bounds the
issue gives (the benchmark, ``bench/run.py``, has the figures).
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import django_durajobs
from bench.redaction import HOSTILE, TOKEN_LIKE
from django_durajobs import redaction
from django_durajobs.redaction import (
    LOG_MESSAGE_MAX_CHARS,
    REDACTED,
    TRACEBACK_MAX_CHARS,
    RedactingFilter,
    describe_exception,
    package_logger,
    redact_text,
    shown_text,
)
from django_durajobs.worker import logger as worker_logger
from tests.testapp.kinds_secrets import HUGE_SECRET, huge_message

MEGABYTE = 1_000_000
SECRET = "hunter2-FAKE-0c1d"


def cpu_seconds(work: Callable[[], object], runs: int = 3) -> float:
    """The least CPU time ``work()`` took in ``runs`` runs."""
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def cut(text: str, limit: int) -> str:
    """What a text shown at ``limit`` characters is: itself, or its start and "…"."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


# Linear time ----------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", TOKEN_LIKE)
def test_redacting_a_megabyte_of_token_like_text_takes_under_a_second(shape):
    text = TOKEN_LIKE[shape](MEGABYTE)

    assert cpu_seconds(lambda: redact_text(text)) < 1.0


@pytest.mark.parametrize("shape", HOSTILE)
def test_redaction_time_grows_with_the_text_not_with_its_square(shape):
    """Eight times the text takes about eight times as long; a quadratic search would take 64."""
    small, large = HOSTILE[shape](MEGABYTE // 32), HOSTILE[shape](MEGABYTE // 4)

    small_time = cpu_seconds(lambda: redact_text(small))
    large_time = cpu_seconds(lambda: redact_text(large))

    assert large_time < 20 * small_time + 0.05, (small_time, large_time)


#: Pieces that make redaction read: key names (secret or not), their separators, values, quotes,
#: the starts of tokens and URLs, blanks and line ends.
PIECES = (
    "password",
    "api_key",
    "Authorization",
    "cookie",
    "CLIENT_SECRET",
    "token",
    "monkey",
    "a",
    "=",
    ":",
    ": ",
    " is ",
    " => ",
    " ",
    "\t",
    "\n",
    '"',
    "'",
    "\\",
    ",",
    "x",
    "1",
    "://u:",
    "@",
    "/",
    "Bearer ",
    "ghp_",
    "eyJ",
    "-p",
    "mysql ",
    "-----BEGIN PRIVATE KEY-----",
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(unit=st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join))
def test_no_text_makes_redaction_slower_than_linear(unit):
    """Any short piece repeated: eight times the text costs about eight times the time."""
    small = unit * (4_000 // len(unit) + 1)
    large = small * 8

    small_time = cpu_seconds(lambda: redact_text(small))
    large_time = cpu_seconds(lambda: redact_text(large))

    assert large_time < 24 * small_time + 0.05, (unit, small_time, large_time)


# Cut before redacted ----------------------------------------------------------------------------

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"

TEXTS_AND_LIMITS = [
    pytest.param("x" * 490 + " password=" + SECRET * 40 + " done", 500, id="secret across the limit"),
    pytest.param("x" * 495 + f" {JWT} done", 500, id="JWT across the limit"),
    pytest.param(
        "x" * 480 + " postgres://app:" + "p" * 300 + "@db/x", 500, id="URL whose password ends past the limit"
    ),
    pytest.param(
        "password=" + "A" * 3000 + "\n" + JWT + "\n" + "ok " * 3000,
        500,
        id="a secret shrinks the text, a JWT where the first window ends",
    ),
    pytest.param(
        "".join(f"token={'T' * 900} line {n}\n" for n in range(60)) + f"api_key={SECRET}\n" + "end " * 500,
        500,
        id="many secrets shrink the text",
    ),
    pytest.param("password=" + "A" * 100_000, 500, id="the whole text is one secret"),
    pytest.param("-----BEGIN PRIVATE KEY-----\n" + "MIIE" * 5000, 4000, id="private key without its end"),
    pytest.param(("ok " * 200 + "\n") * 50, 50, id="no secret"),
]


@pytest.mark.parametrize("text, limit", TEXTS_AND_LIMITS)
def test_a_text_shown_at_a_limit_is_the_redacted_text_cut_there(text, limit):
    """Only a window past the limit is redacted, yet nothing shows that redacting the whole text
    would hide: a secret across the limit, or cut where a window ends, never shows half."""
    shown = shown_text(text, limit)

    assert shown == cut(redact_text(text), limit)
    assert len(shown) <= limit
    assert SECRET[:6] not in shown and JWT[:12] not in shown


def test_a_huge_text_with_a_limit_costs_only_its_window():
    ten_megabytes = HOSTILE["a secret every five characters"](10 * MEGABYTE)

    assert cpu_seconds(lambda: shown_text(ten_megabytes, 500)) < 0.05
    assert shown_text(ten_megabytes, 500) == cut(redact_text(ten_megabytes[:5000]), 500)


def test_an_exception_with_a_megabyte_message_is_described_briefly_and_redacted():
    error = RuntimeError(huge_message())

    assert cpu_seconds(lambda: describe_exception(error)) < 1.0
    described = describe_exception(error)
    assert len(described) <= 4000
    assert described.startswith(f"RuntimeError: login failed: password={REDACTED}")
    assert HUGE_SECRET not in described


def test_only_short_texts_are_kept_in_the_caches():
    long_text = "password=" + "x" * (redaction.CACHED_CHARS + 1)
    caches = (redaction._shown_short_text, redaction._redacted_short_text)
    sizes = [cache.cache_info().currsize for cache in caches]
    misses = [cache.cache_info().misses for cache in caches]

    shown_text(long_text, 500)
    redact_text(long_text)
    shown_text("password=short")

    assert [cache.cache_info().currsize for cache in caches] <= [size + 1 for size in sizes]
    assert [cache.cache_info().misses for cache in caches] <= [miss + 1 for miss in misses]


# The package's log records ---------------------------------------------------------------------


def package_modules() -> None:
    """Import every module of the package, so that every logger it makes exists."""
    for module in pkgutil.walk_packages(django_durajobs.__path__, "django_durajobs."):
        if ".migrations" not in module.name:
            importlib.import_module(module.name)


def test_every_logger_of_the_package_redacts_its_records():
    package_modules()

    names = [name for name in logging.root.manager.loggerDict if name.split(".")[0] == "django_durajobs"]

    assert {"django_durajobs", "django_durajobs.worker"} <= set(names)
    for name in names:
        filters = logging.getLogger(name).filters
        assert any(isinstance(f, RedactingFilter) for f in filters), f"{name}: make it with package_logger()"
    child = package_logger("django_durajobs.tests_child")
    assert any(isinstance(f, RedactingFilter) for f in child.filters)
    with pytest.raises(ValueError):
        package_logger("someone_else")


def test_a_warning_is_recorded_redacted_and_bounded(caplog):
    logger = logging.getLogger("django_durajobs")

    with caplog.at_level(logging.WARNING, logger="django_durajobs"):
        logger.warning("connecting with %s, retrying", f"password={SECRET}")
        logger.error("huge: %s", "password=" + "y" * MEGABYTE)

    first, huge = caplog.records
    assert first.getMessage() == f"connecting with password={REDACTED}, retrying"
    assert len(huge.getMessage()) <= LOG_MESSAGE_MAX_CHARS
    assert SECRET not in caplog.text


def test_a_traceback_is_recorded_as_redacted_text(caplog):
    logger = worker_logger  # made by django_durajobs.worker, as the worker logs

    with caplog.at_level(logging.WARNING, logger="django_durajobs"):
        try:
            password = SECRET  # noqa: F841  (a local the traceback's frame holds)
            raise ConnectionError(f"login failed with\npassword={SECRET}")
        except ConnectionError:
            logger.exception("Job 7 raised")

    (record,) = caplog.records
    assert record.exc_info is None  # an error tracker cannot read the frame's locals
    assert record.exc_text.startswith("Traceback (most recent call last):")
    assert "test_a_traceback_is_recorded_as_redacted_text" in record.exc_text
    assert record.exc_text.endswith(f"ConnectionError: login failed with\npassword={REDACTED}")
    assert SECRET not in caplog.text
    assert "Traceback (most recent call last):" in caplog.text


def test_a_long_chain_of_tracebacks_keeps_its_start_and_end_within_its_bound(caplog):
    def fail(depth: int) -> None:
        try:
            if depth:
                fail(depth - 1)
            raise ValueError(f"innermost {'x' * 3000}")
        finally:
            if depth:
                raise KeyError(f"level {depth} {'y' * 3000}")

    with caplog.at_level(logging.WARNING, logger="django_durajobs"):
        try:
            fail(40)
        except KeyError:
            logging.getLogger("django_durajobs").exception("chained")

    (record,) = caplog.records
    assert len(record.exc_text) <= TRACEBACK_MAX_CHARS + 200
    assert "ValueError: innermost" in record.exc_text
    assert record.exc_text.endswith("y" * 20 + "'")  # the last exception, KeyError: 'level 40 yyy…'
    assert "more parts of the traceback left out" in record.exc_text


def test_records_below_warning_go_through_untouched(caplog):
    """The package logs only text redacted when it was stored at info, once or twice per job:
    those records cost the filter one comparison."""
    arguments = (7, "demo", "Done.")

    with caplog.at_level(logging.INFO, logger="django_durajobs"):
        logging.getLogger("django_durajobs").info("Job %s (%s) done: %s", *arguments)

    (record,) = caplog.records
    assert record.args == arguments
    assert record.msg == "Job %s (%s) done: %s"
