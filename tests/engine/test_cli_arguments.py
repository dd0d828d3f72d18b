"""What ``manage.py jobs`` and ``prunejobs`` make of the text an operator types (no database)."""

from __future__ import annotations

import argparse
from datetime import timedelta

import pytest

from django_durajobs.cli.arguments import age, json_value, merged, subject_filter


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("45s", timedelta(seconds=45)),
        ("90m", timedelta(minutes=90)),
        ("12h", timedelta(hours=12)),
        ("30d", timedelta(days=30)),
        ("2w", timedelta(weeks=2)),
        ("1.5d", timedelta(hours=36)),
        ("0d", timedelta(0)),
    ],
)
def test_an_age_is_a_number_and_a_unit(text, expected):
    assert age(text) == expected


@pytest.mark.parametrize(
    "text", ["30", "d", "-1d", "30 days", "1e3d", "30D", "9" * 400 + "w", "101000000000d"]
)
def test_anything_else_is_not_an_age(text):
    with pytest.raises(argparse.ArgumentTypeError):
        age(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("site=web-1", {"site": "web-1"}),
        ("site_id=7", {"site_id": "7"}),
        ("site_id:=7", {"site_id": 7}),
        ("on:=true", {"on": True}),
        ("gone:=null", {"gone": None}),
        ("server.name=db", {"server": {"name": "db"}}),
        ("url=https://x/?a=b", {"url": "https://x/?a=b"}),
        ('{"a": {"b": [1]}}', {"a": {"b": [1]}}),
    ],
)
def test_a_subject_filter_is_key_text_key_json_or_an_object(text, expected):
    assert subject_filter(text) == expected


@pytest.mark.parametrize("text", ["site", "=x", "a..b=1", "n:=seven", "{not json", "[1, 2]"])
def test_a_subject_filter_refuses_what_it_cannot_read(text):
    with pytest.raises(argparse.ArgumentTypeError):
        subject_filter(text)


def test_subject_filters_merge_key_by_key():
    filters = [
        subject_filter("server.name=db"),
        subject_filter("server.port:=5432"),
        subject_filter("on:=true"),
    ]

    assert merged(filters) == {"server": {"name": "db", "port": 5432}, "on": True}


def test_data_is_json():
    assert json_value('{"note": "ok"}') == {"note": "ok"}
    with pytest.raises(argparse.ArgumentTypeError, match="not JSON"):
        json_value("{note}")
