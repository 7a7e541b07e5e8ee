"""Time in words against a fixed now (Wednesday 2026-11-25 15:30 UTC): the range each expression names."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

pytest.importorskip("dateparser")

from hybridlab.search.time_range import parse_time, resolve_time_range

NOW = datetime(2026, 11, 25, 15, 30, tzinfo=UTC)
END = ".999999Z"
NOW_ISO = "2026-11-25T15:30:00Z"
RANGES = [  # expression, since, until (both inclusive)
    ("yesterday", "2026-11-24T00:00:00Z", "2026-11-24T23:59:59" + END),
    ("today", "2026-11-25T00:00:00Z", NOW_ISO),
    ("2 days ago", "2026-11-23T00:00:00Z", "2026-11-23T23:59:59" + END),
    ("last friday", "2026-11-20T00:00:00Z", "2026-11-20T23:59:59" + END),
    ("last week", "2026-11-16T00:00:00Z", "2026-11-22T23:59:59" + END),  # Monday to Sunday
    ("this week", "2026-11-23T00:00:00Z", NOW_ISO),
    ("3 weeks ago", "2026-11-02T00:00:00Z", "2026-11-08T23:59:59" + END),
    ("in March", "2026-03-01T00:00:00Z", "2026-03-31T23:59:59" + END),
    ("in December", "2025-12-01T00:00:00Z", "2025-12-31T23:59:59" + END),  # the last December up to now
    ("March 2025", "2025-03-01T00:00:00Z", "2025-03-31T23:59:59" + END),
    ("last month", "2026-10-01T00:00:00Z", "2026-10-31T23:59:59" + END),
    ("last year", "2025-01-01T00:00:00Z", "2025-12-31T23:59:59" + END),
    ("March 5", "2026-03-05T00:00:00Z", "2026-03-05T23:59:59" + END),
    ("2026-03-05", "2026-03-05T00:00:00Z", "2026-03-05T23:59:59" + END),
    ("5 hours ago", "2026-11-25T10:30:00Z", NOW_ISO),
    ("last 3 days", "2026-11-22T15:30:00Z", NOW_ISO),
    ("past 2 weeks", "2026-11-11T15:30:00Z", NOW_ISO),
    ("since Monday", "2026-11-23T00:00:00Z", NOW_ISO),
    ("since 2026-11-01", "2026-11-01T00:00:00Z", NOW_ISO),
    ("until yesterday", None, "2026-11-24T23:59:59" + END),
    ("before March", None, "2026-02-28T23:59:59" + END),
]


@pytest.mark.parametrize(("expression", "since", "until"), RANGES)
def test_expression_names_its_range(expression, since, until):
    assert parse_time(expression, NOW).to_dict() == {"expression": expression, "since": since, "until": until}


@pytest.mark.parametrize("expression", ["blah", "sometime soon-ish", "   "])
def test_unparseable_expressions_are_refused_with_examples(expression):
    with pytest.raises(ValueError, match="time") as error:
        parse_time(expression, NOW)
    assert "yesterday" in str(error.value)


def test_iso_since_until_or_words_not_both():
    assert resolve_time_range(None, None, None, NOW) is None
    window = resolve_time_range(None, "2026-01-01", None, NOW)
    assert window.to_dict() == {"expression": None, "since": "2026-01-01T00:00:00Z", "until": None}
    with pytest.raises(ValueError, match="not both"):
        resolve_time_range("yesterday", "2026-01-01", None, NOW)
    with pytest.raises(ValueError, match="not an ISO-8601 date"):
        resolve_time_range(None, "last tuesday", None, NOW)
