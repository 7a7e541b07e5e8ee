"""Time in words: "yesterday", "last week", "2 days ago", "in March", "since Monday" as a (since, until) range.
See docs/internals/search.md#time-range."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from hybridlab.errors import InvalidValueError
from hybridlab.extras import require
from hybridlab.search.filters import parse_when

__all__ = ["TimeRange", "parse_time", "resolve_time_range"]

EXAMPLES = '"yesterday", "last week", "2 days ago", "in March", "since Monday", "last 3 days", "2026-03-05"'
TICK = timedelta(microseconds=1)
_SPAN = re.compile(r"^(?:last|past)\s+(\d+)\s+(hour|day|week|month|year)s?$")
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}


@dataclass(frozen=True)
class TimeRange:
    """A time filter: both ends inclusive, aware UTC (None = open); `expression` = the words it came
    from (None for ISO `since`/`until`)."""

    since: datetime | None
    until: datetime | None
    expression: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"expression": self.expression, "since": iso_z(self.since), "until": iso_z(self.until)}


def iso_z(value: datetime | None) -> str | None:
    """An aware time as ISO-8601 UTC with a Z."""
    return None if value is None else value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _period(point: datetime, period: str) -> tuple[datetime, datetime]:
    """[start, end) of the calendar `period` ("day", "week", "month", "year") holding `point`."""
    day = point.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    if period == "month":
        start = day.replace(day=1)
        return start, (start + timedelta(days=32)).replace(day=1)
    if period == "year":
        start = day.replace(month=1, day=1)
        return start, start.replace(year=start.year + 1)
    return day, day + timedelta(days=1)


def _point(text: str, now: datetime, original: str) -> tuple[datetime, datetime]:
    """[start, end) of the period `text` names, relative to `now` (aware UTC); ValueError if unparsed."""
    require("dateparser")
    from dateparser.date import DateDataParser

    parser = DateDataParser(
        languages=["en"],
        settings={
            "RELATIVE_BASE": now.astimezone(UTC).replace(tzinfo=None),
            "PREFER_DATES_FROM": "past",
            "RETURN_TIME_AS_PERIOD": True,
            "TIMEZONE": "UTC",
            "TO_TIMEZONE": "UTC",
            "RETURN_AS_TIMEZONE_AWARE": True,
        },
    )
    data = parser.get_date_data(text)
    if data.date_obj is None:
        raise InvalidValueError(
            f"time: cannot read {original!r} as a time expression; try {EXAMPLES}, "
            f"or give since/until as ISO-8601 dates",
            field="time",
        )
    point = data.date_obj.astimezone(UTC)
    if data.period == "time":  # "5 hours ago": from then on
        return point, now + TICK
    return _period(point, data.period or "day")


def parse_time(expression: str, now: datetime) -> TimeRange:
    """The range an English time expression names, relative to `now` (docs/internals/search.md#time-range)."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidValueError(f"time must be a non-empty expression such as {EXAMPLES}", field="time")
    now = now.astimezone(UTC) if now.tzinfo else now.replace(tzinfo=UTC)
    try:
        return _time_range(" ".join(expression.lower().split()), now, expression)
    except (OverflowError, ValueError) as error:
        # past the ends of datetime's range ("in 9999", "last 999999 years", "until 9999-12-31"): the
        # caller's; any other ValueError is a bug, left as it is
        if isinstance(error, ValueError) and (
            isinstance(error, InvalidValueError) or "out of range" not in str(error)
        ):
            raise
        raise InvalidValueError(
            f"time: {expression!r} reaches beyond the dates that can be represented (years 1 to 9999)",
            field="time",
        ) from None


def _time_range(text: str, now: datetime, expression: str) -> TimeRange:
    """`parse_time` of the normalised (lower case, single-spaced) `text`."""
    text = text.removeprefix("in ")
    span = _SPAN.match(text)
    if span:
        amount, unit = int(span.group(1)), span.group(2)
        width = timedelta(hours=amount) if unit == "hour" else timedelta(days=amount * _UNIT_DAYS[unit])
        return TimeRange(now - width, now, expression)
    for prefix in ("since ", "after ", "from "):
        if text.startswith(prefix):
            start, _ = _point(text[len(prefix) :], now, expression)
            return TimeRange(start, now, expression)
    if text.startswith("until "):
        _, end = _point(text[len("until ") :], now, expression)
        return TimeRange(None, end - TICK, expression)
    if text.startswith("before "):
        start, _ = _point(text[len("before ") :], now, expression)
        return TimeRange(None, start - TICK, expression)
    start, end = _point(text, now, expression)
    return TimeRange(start, min(end - TICK, now) if start <= now < end else end - TICK, expression)


def resolve_time_range(
    time: str | None, since: str | None, until: str | None, now: datetime
) -> TimeRange | None:
    """The filter of a call's `time` expression or ISO `since`/`until` (not both); None = no filter."""
    if time is not None and (since or until):
        raise InvalidValueError("give either time (an expression) or since/until (ISO-8601 dates), not both")
    if time is not None:
        return parse_time(time, now)
    if since or until:
        return TimeRange(parse_when(since, "since"), parse_when(until, "until"))
    return None
