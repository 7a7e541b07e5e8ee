"""The time a query names (search/query_dates.py) and the pipeline weighing rows created outside it."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from hybridlab.config import SearchConfig, with_added_settings
from hybridlab.search.query_dates import date_factors, dates_in_query

NOW = datetime(2023, 10, 20, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "expression", "since", "until"),
    [
        (
            "What did Jolene achieve recently on 4 February, 2023?",
            "4 February, 2023",
            "2023-02-04",
            "2023-02-04",
        ),
        ("Which city was Calvin at on October 3, 2023?", "October 3, 2023", "2023-10-03", "2023-10-03"),
        ("what happened on the 8th of May", "8th of May", "2023-05-08", "2023-05-08"),
        ("What did John adopt in April 2022?", "April 2022", "2022-04-01", "2022-04-30"),
        ("the deploy plan from Sept. 2021", "Sept. 2021", "2021-09-01", "2021-09-30"),
        ("What state did Joanna visit in summer 2021?", "summer 2021", "2021-06-01", "2021-08-31"),
        ("trips in winter of 2022", "winter of 2022", "2022-12-01", "2023-02-28"),
        ("How many times has Melanie gone to the beach in 2023?", "in 2023", "2023-01-01", "2023-12-31"),
        ("the 2023-05-08 meeting notes", "2023-05-08", "2023-05-08", "2023-05-08"),
        ("what did we decide in March", "in March", "2023-03-01", "2023-03-31"),
        (
            "what did we decide in November",
            "in November",
            "2022-11-01",
            "2022-11-30",
        ),  # the latest before now
    ],
)
def test_explicit_dates_are_read_from_the_pattern(query, expression, since, until):
    dates = dates_in_query(query, NOW)
    assert dates is not None and dates.expression == expression
    assert dates.period.since.date().isoformat() == since and dates.period.until.date().isoformat() == until


@pytest.mark.parametrize(
    "query",
    [
        "rathole project codebase architecture",
        "I may 2 go",
        "march 10 times around the block",
        "What is Caroline's identity?",
        "version 2023 of the spec",
    ],
)
def test_words_that_only_look_like_dates_are_not_dates(query):
    assert dates_in_query(query, NOW) is None


def test_an_impossible_day_falls_back_to_its_month():
    assert dates_in_query("31 June 2023 was never a day", NOW).expression == "June 2023"


def test_relative_expressions_count_from_now():
    pytest.importorskip("dateparser")
    week = dates_in_query("what did I decide last week about caching", NOW)
    assert (week.period.since.date().isoformat(), week.period.until.date().isoformat()) == (
        "2023-10-09",
        "2023-10-15",
    )
    ago = dates_in_query("what did we cook two weeks ago", NOW)
    assert ago.expression == "two weeks ago" and ago.period.since.date().isoformat() == "2023-10-02"
    assert dates_in_query("what did Mel do 3 days ago?", NOW).period.since.date().isoformat() == "2023-10-17"


def test_rows_outside_the_window_lose_the_weight_and_undated_rows_keep_theirs():
    dates = dates_in_query("in April 2022", NOW)
    times = np.array(
        [
            datetime(2022, 4, 15, tzinfo=UTC).timestamp(),
            datetime(2022, 5, 10, tzinfo=UTC).timestamp(),
            datetime(2022, 5, 20, tzinfo=UTC).timestamp(),
            datetime(2022, 3, 31, tzinfo=UTC).timestamp(),
            np.nan,
        ]
    )
    # in April; 10 days after (within the 14-day grace); 20 days after; the day before; no time at all
    assert date_factors(times, dates, 0.5, 14.0).tolist() == [1.0, 1.0, 0.5, 0.5, 1.0]
    assert date_factors(times, dates, 0.5, 0.0).tolist() == [1.0, 0.5, 0.5, 0.5, 1.0]
    assert date_factors(times, None, 0.5, 14.0).tolist() == [1.0] * 5
    assert date_factors(times, dates, 0.0, 14.0).tolist() == [1.0] * 5


def test_settings_are_checked_and_exported_configs_keep_their_behaviour():
    with pytest.raises(ValueError, match="date_weight"):
        SearchConfig(date_weight=1.5)
    with pytest.raises(ValueError, match="date_grace_days"):
        SearchConfig(date_grace_days=-1)
    assert with_added_settings({"alpha": 0.5})["date_weight"] == 0.0


# ------------------------------------------------------------------ in the pipeline
@pytest.fixture(scope="module")
def diary(tmp_path_factory):
    """The same kind of event told in three months: only the date tells them apart."""
    import json

    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths
    from hybridlab.search.engine import open_index

    root = tmp_path_factory.mktemp("diary")
    rows = [
        ("d1", "We went hiking in the hills and had a picnic by the lake.", "2022-03-12"),
        ("d2", "We went hiking in the mountains and had a picnic at the top.", "2022-04-16"),
        ("d3", "We went hiking in the forest and had a picnic under the oaks.", "2022-06-02"),
        ("d4", "The car needed new tyres before the long drive.", "2022-04-20"),
    ]
    source = root / "diary.jsonl"
    source.write_text(
        "".join(
            json.dumps({"id": i, "content": c, "tags": ["diary"], "created_at": f"{d}T12:00:00Z"}) + "\n"
            for i, c, d in rows
        )
    )
    index_paths(
        [source],
        root / "index",
        IndexConfig(models=("wordllama",)),
        progress=False,
        cache_path=root / "embeddings.duckdb",
    )
    opened = open_index(root / "index")
    yield opened
    opened.close()


def test_a_query_naming_a_month_ranks_that_months_memories_first(diary):
    query = "where did we go hiking in April 2022"
    [top] = diary.search(query, limit=1, now="2022-07-01T00:00:00Z", explain=True)
    assert top.doc_id == "d2"
    assert top.explain["query_dates"]["expression"] == "April 2022" and top.explain["date_factor"] == 1.0
    assert top.explain["date_weight_used"] == SearchConfig().date_weight
    others = diary.search(query, limit=4, now="2022-07-01T00:00:00Z", explain=True)
    assert {hit.doc_id: hit.explain["date_factor"] for hit in others}["d3"] == pytest.approx(
        1 - SearchConfig().date_weight
    )
    off = diary.search(query, limit=4, now="2022-07-01T00:00:00Z", date_weight=0.0, explain=True)
    assert all(hit.explain["date_factor"] == 1.0 for hit in off) and off[0].explain["date_weight_used"] == 0.0


def test_a_named_date_turns_the_recency_intent_off(diary):
    [hit] = diary.search(
        "where did we go hiking recently, on 16 April 2022", limit=1, now="2022-07-01T00:00:00Z", explain=True
    )
    assert hit.explain["recency_intent"] is False and hit.doc_id == "d2"
    [latest] = diary.search("what did we do recently", limit=1, now="2022-07-01T00:00:00Z", explain=True)
    assert latest.explain["recency_intent"] is True


def test_the_dates_weigh_nothing_outside_hybrid_mode(diary):
    hits = diary.search(
        "hiking picnic in April 2022", limit=3, now="2022-07-01T00:00:00Z", mode="bm25", explain=True
    )
    assert all(hit.explain["date_factor"] == 1.0 and hit.explain["date_weight_used"] == 0.0 for hit in hits)


def test_the_cli_passes_the_date_settings_to_the_search():
    from hybridlab.cli import build_parser
    from hybridlab.cli.options import search_kwargs

    args = build_parser().parse_args(
        ["search", "hiking in April 2022", "--date-weight", "0.2", "--date-grace-days", "7"]
    )
    assert {k: search_kwargs(args)[k] for k in ("date_weight", "date_grace_days")} == {
        "date_weight": 0.2,
        "date_grace_days": 7.0,
    }
    assert "date_weight" not in search_kwargs(build_parser().parse_args(["search", "hiking"]))
