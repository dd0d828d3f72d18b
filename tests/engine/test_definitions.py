"""A ``@job`` definition is checked when its module is imported: a bad one raises and registers
nothing, and one name belongs to one function.
"""

from __future__ import annotations

import pytest

from django_durajobs import JobError
from django_durajobs.registry import get_kind, job, unregister


@pytest.fixture
def kind_name(request):
    """A kind name of this test's own, unregistered afterwards."""
    name = f"inputs_reg_{request.node.name}"[:90]
    unregister(name)
    yield name
    unregister(name)


def _run(job, ctx):
    return None


BAD_DEFINITIONS = [
    pytest.param({"steps": [("copy", "Copy"), ("copy", "Copy again")]}, id="duplicate step ids"),
    pytest.param({"steps": ["copy", "copy"]}, id="duplicate plain step ids"),
    pytest.param({"steps": [(1, "One")]}, id="int step id"),
    pytest.param({"steps": [(None, "None")]}, id="None step id"),
    pytest.param({"steps": [("", "Blank")]}, id="empty step id"),
    pytest.param({"steps": [("  ", "Blank")]}, id="blank step id"),
    pytest.param({"max_attempts": 0}, id="max_attempts 0"),
    pytest.param({"max_attempts": -3}, id="max_attempts -3"),
    pytest.param({"max_attempts": "2"}, id="max_attempts '2'"),
    pytest.param({"priority": 101}, id="priority 101"),
    pytest.param({"priority": -101}, id="priority -101"),
    pytest.param({"priority": "5"}, id="priority '5'"),
    pytest.param(
        {"steps": [("s" * 101, "Long")]},
        id="step id over 100 characters",
    ),
]


@pytest.mark.parametrize("options", BAD_DEFINITIONS)
def test_job_refuses_a_bad_definition_at_import_time(kind_name, options):
    """A bad @job definition raises ValueError when the module is imported, and registers nothing."""
    with pytest.raises(ValueError):

        @job(kind_name, **options)
        def bad_kind(job, ctx):
            return None

    with pytest.raises(JobError) as unknown:
        get_kind(kind_name)
    assert unknown.value.code == "unknown_job_kind"


def test_job_refuses_a_kind_name_longer_than_the_kind_column():
    name = "inputs_" + "n" * 100
    try:
        with pytest.raises(ValueError):

            @job(name)
            def long_named(job, ctx):
                return None

    finally:
        unregister(name)


def test_registering_one_name_from_another_function_raises_and_keeps_the_first(kind_name):
    """Two kinds cannot share a name: the second registration raises and the first stays."""

    @job(kind_name, title="First")
    def first_definition(job, ctx):
        return "first"

    with pytest.raises(ValueError) as refused:

        @job(kind_name, title="Second")
        def second_definition(job, ctx):
            return "second"

    assert kind_name in str(refused.value)
    assert get_kind(kind_name).run is first_definition.run
    assert get_kind(kind_name).title == "First"


def test_registering_the_same_function_again_is_allowed(kind_name):
    """Importing a jobs module twice (autodiscovery, reloads) re-registers the same function."""
    first = job(kind_name, title="Once")(_run)
    again = job(kind_name, title="Once")(_run)

    assert get_kind(kind_name) is again
    assert again.run is first.run


@pytest.mark.parametrize("max_attempts", [2**70, 1_000_001, 0])
def test_a_kind_with_max_attempts_out_of_range_is_refused_at_import_time(max_attempts):
    with pytest.raises(ValueError, match="max_attempts"):
        job("limits_never_registered", max_attempts=max_attempts)(lambda job, ctx: None)
