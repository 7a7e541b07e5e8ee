"""The time a query is about, read from its words: "on 8 May, 2023", "in July 2022", "summer 2021",
"in 2022", "2023-05-08", "yesterday", "last week", "two weeks ago".

A memory is said when (or shortly after) what it tells happened, so a query that names a time
points at the memories created in that period or within `grace` days after it; the pipeline weighs
rows outside that window down (`date_weight`, :func:`date_factors`). A soft preference, never a
filter: the `time` / `since` / `until` arguments are the filter.

Explicit calendar dates are read from the pattern's own groups (day, month name, year): the library
search for dates in free text (`dateparser.search.search_dates`) also takes "may", "second" or "sat"
for dates. Relative expressions are resolved against the query's `now` by :func:`parse_time`
(dateparser) when that package is installed, else skipped.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from hybridlab.search.time_range import TimeRange, parse_time

__all__ = ["QueryDates", "date_factors", "dates_in_query"]

MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)
_MONTH_NUMBERS = {name[:3]: number for number, name in enumerate(MONTHS, 1)}  # "sept"[:3] is "sep" too
_MONTH = r"(?P<month>" + "|".join(MONTHS) + r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
#: (start month, months long) of the seasons of the northern hemisphere; winter starts in December
SEASONS = {"spring": (3, 3), "summer": (6, 3), "autumn": (9, 3), "fall": (9, 3), "winter": (12, 3)}
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "couple of": 2,
    "few": 3,
}

#: explicit calendar expressions, most specific first; a bare month name needs "in"/"of"/"during"
#: before it ("may" and "march" are verbs too)
_EXPLICIT = [
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        r"\b(?P<iso>(?:19|20)\d\d-[01]\d(?:-[0-3]\d)?)\b",
        rf"\b{_DAY}\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b",
        rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b",
        rf"\b(?P<season>spring|summer|autumn|fall|winter)\s+(?:of\s+)?{_YEAR}\b",
        rf"\b{_MONTH},?\s+(?:of\s+)?{_YEAR}\b",
        rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b(?!\s*,?\s*(?:19|20)\d\d)",
        rf"\b{_MONTH}\s+{_DAY}\b(?!\s*,?\s*(?:19|20)\d\d)(?!\s*(?:%|[a-z]))",
        rf"\b(?:in|during|of|since|by|before|after|until)\s+(?:early\s+|late\s+|mid-?\s*)?{_YEAR}\b",
        rf"\b(?:in|during|of)\s+(?:early\s+|late\s+|mid-?\s*)?{_MONTH}\b(?!\s*,?\s*(?:19|20)\d\d)",
    )
]
#: relative expressions, resolved against `now` by :func:`parse_time`
_RELATIVE = re.compile(
    r"\b(?:yesterday|the day before yesterday|last\s+(?:week|weekend|month|year|monday|tuesday|wednesday|"
    r"thursday|friday|saturday|sunday)|(?:a|an|one|two|three|four|five|six|seven|eight|nine|ten|couple of|few|\d+)"
    r"\s+(?:days?|weeks?|months?|years?)\s+ago)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class QueryDates:
    """The period a query names (`expression`: its words) and the window of creation times it
    points at: [since, until + grace]."""

    expression: str
    period: TimeRange

    def window(self, grace_days: float) -> tuple[float, float]:
        """The window of creation times, epoch seconds, both ends inclusive."""
        since = self.period.since.timestamp() if self.period.since else -np.inf
        until = self.period.until.timestamp() + grace_days * 86400.0 if self.period.until else np.inf
        return since, until

    def to_dict(self) -> dict[str, str | None]:
        return {
            "expression": self.expression,
            **{k: v for k, v in self.period.to_dict().items() if k != "expression"},
        }


def dates_in_query(query: str, now: datetime) -> QueryDates | None:
    """The first time expression of the query (explicit dates before relative ones) as a period;
    None when it names no time."""
    now = now.astimezone(UTC) if now.tzinfo else now.replace(tzinfo=UTC)
    for pattern in _EXPLICIT:
        for match in pattern.finditer(query):
            period = _explicit_period(match, now)
            if period is not None:
                return QueryDates(match.group(0), period)
    relative = _RELATIVE.search(query)
    if relative is None or importlib.util.find_spec("dateparser") is None:
        return None
    text = relative.group(0).lower()
    for word, number in _NUMBERS.items():
        text = re.sub(rf"^{word}\s+", f"{number} ", text)
    try:
        return QueryDates(relative.group(0), parse_time(text, now))
    except ValueError:
        return None


def date_factors(times: np.ndarray, dates: QueryDates | None, weight: float, grace_days: float) -> np.ndarray:
    """Per row: 1 when its creation time is in the query's window (or it has none, NaN), else
    `1 - weight`; all 1 without dates or weight."""
    factors = np.ones(len(times))
    if dates is None or weight <= 0:
        return factors
    since, until = dates.window(grace_days)
    outside = ~np.isnan(times) & ((times < since) | (times > until))
    factors[outside] = 1.0 - weight
    return factors


def _explicit_period(match: re.Match[str], now: datetime) -> TimeRange | None:
    """The [start, end] of an explicit calendar expression; None for an impossible date (31 June)."""
    groups = {name: value for name, value in match.groupdict().items() if value}
    try:
        if "iso" in groups:
            parts = [int(part) for part in groups["iso"].split("-")]
            return _span(parts[0], parts[1], parts[2] if len(parts) > 2 else None)
        year = int(groups["year"]) if "year" in groups else None
        if "season" in groups:
            assert year is not None  # the season pattern has a year
            start_month, months = SEASONS[groups["season"].lower()]
            start = datetime(year, start_month, 1, tzinfo=UTC)
            return TimeRange(start, _add_months(start, months) - timedelta(microseconds=1))
        month = _month_number(groups["month"]) if "month" in groups else None
        if month is None:
            assert year is not None  # every pattern without a month (nor an ISO date) has a year
            return _span(year, None, None)
        if year is None:  # "in March", "8 May": the latest such date not after now
            year = now.year if (month, int(groups.get("day", 1))) <= (now.month, now.day) else now.year - 1
        return _span(year, month, int(groups["day"]) if "day" in groups else None)
    except ValueError:
        return None


def _span(year: int, month: int | None, day: int | None) -> TimeRange:
    """The whole year, month or day as a range with inclusive ends."""
    if month is None:
        start, end = datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC)
    elif day is None:
        start = datetime(year, month, 1, tzinfo=UTC)
        end = _add_months(start, 1)
    else:
        start = datetime(year, month, day, tzinfo=UTC)
        end = start + timedelta(days=1)
    return TimeRange(start, end - timedelta(microseconds=1))


def _add_months(start: datetime, months: int) -> datetime:
    index = start.month - 1 + months
    return start.replace(year=start.year + index // 12, month=index % 12 + 1)


def _month_number(name: str) -> int:
    return _MONTH_NUMBERS[name.lower()[:3]]
