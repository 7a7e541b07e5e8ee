"""Filters: DuckDB SQL, and pushed into both retrievers so rare filters still fill `limit`."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime

import pytest

from hybridlab.config import IndexConfig
from hybridlab.search.filters import Filters, naive_utc, parse_when

N_CHUNKS = 20_000
RARE = 20  # 0.1 % of the index
NOW = "2026-11-01T00:00:00Z"


# ------------------------------------------------------------------ pure parts
def test_parse_when_accepts_dates_datetimes_and_z():
    assert parse_when("2025-03-01", "since") == datetime(2025, 3, 1, tzinfo=UTC)
    assert parse_when("2025-03-01T10:00:00Z", "since") == datetime(2025, 3, 1, 10, tzinfo=UTC)
    assert parse_when(datetime(2025, 3, 1), "since").tzinfo is UTC
    assert parse_when(None, "since") is None and parse_when("", "since") is None
    with pytest.raises(ValueError, match=r"until: not an ISO-8601 date: 'yesterday'"):
        parse_when("yesterday", "until")


def test_naive_utc_converts_offsets():
    aware = datetime.fromisoformat("2025-03-01T12:00:00+02:00")
    assert naive_utc(aware) == datetime(2025, 3, 1, 10, 0)


def test_empty_filters_select_everything():
    assert Filters().empty
    sql, params = Filters().sql()
    assert "WHERE TRUE" in sql and params == []


def test_sql_combines_every_filter_with_parameters():
    filters = Filters(
        chunk_types=("memory", "code"),
        tags=("a", "b"),
        collections=("p",),
        since=parse_when("2025-01-01", "since"),
        until=parse_when("2025-12-31", "until"),
        embedding_model="wordllama",
    )
    sql, params = filters.sql()
    assert "c.chunk_type IN (?, ?)" in sql and "d.collection IN (?)" in sql
    assert "HAVING count(DISTINCT tag) = 2" in sql  # all of the tags
    assert params == [
        "memory",
        "code",
        "p",
        datetime(2025, 1, 1),
        datetime(2025, 12, 31),
        "a",
        "b",
        "wordllama",
    ]
    any_sql, _ = Filters(tags=("a", "b"), tags_any=True).sql()
    assert "HAVING" not in any_sql and "tag IN (?, ?)" in any_sql


# ------------------------------------------------------------------ a 20k-chunk index
WORDS = [
    "server",
    "tunnel",
    "cache",
    "index",
    "query",
    "vector",
    "port",
    "config",
    "deploy",
    "build",
    "test",
    "release",
    "network",
    "storage",
    "backup",
    "editor",
    "shell",
    "kernel",
    "driver",
    "schema",
    "migration",
    "queue",
    "worker",
    "cluster",
]


@pytest.fixture(scope="module")
def big_index(tmp_path_factory):
    """20,000 one-chunk memories; 20 carry the tag `zircon`, 20 sit in collection `tiny`, 20 are dated
    2020; the rest are spread over 3 tags, 3 projects and 2025-2026 (synthetic text, seeded)."""
    from hybridlab.index.write.build import index_paths
    from hybridlab.search.engine import open_index

    root = tmp_path_factory.mktemp("big-index")
    rng = random.Random(7)
    rare_tag = set(rng.sample(range(N_CHUNKS), RARE))
    others = [i for i in range(N_CHUNKS) if i not in rare_tag]
    rare_collection = set(rng.sample(others, RARE))
    rare_date = set(rng.sample([i for i in others if i not in rare_collection], RARE))
    lines = []
    for i in range(N_CHUNKS):
        project = "tiny" if i in rare_collection else f"proj{i % 3}"
        day = "2020-06-15" if i in rare_date else f"{2025 + i % 2}-{1 + i % 12:02d}-{1 + i % 28:02d}"
        lines.append(
            json.dumps(
                {
                    "id": f"m{i:05d}",
                    "content": f"note {i}: " + " ".join(rng.choice(WORDS) for _ in range(10)),
                    "tags": ["zircon"] if i in rare_tag else [f"t{i % 3}"],
                    "created_at": f"{day}T08:00:00Z",
                    "metadata": {"project": project},
                }
            )
        )
    source = root / "memories.jsonl"
    source.write_text("\n".join(lines) + "\n")
    index_paths(
        [source],
        root / "index",
        IndexConfig(
            models=("wordllama",), late_models=()
        ),  # filters are the first stage's (no token vectors)
        progress=False,
        cache_path=root / "embeddings.duckdb",
    )
    index = open_index(root / "index")
    yield index, {"tag": rare_tag, "collection": rare_collection, "date": rare_date}
    index.close()


def _number(doc_id: str) -> int:
    return int(doc_id[1:])


@pytest.mark.slow
@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("group_by_document", [True, False])
@pytest.mark.parametrize("query", ["server tunnel cache", "kernel", "completely unrelated words xyzzy"])
def test_rare_tag_filter_fills_the_limit_exactly(big_index, staged, group_by_document, query):
    index, rare = big_index
    assert index.n_chunks == N_CHUNKS
    for limit in (10, RARE):
        results = index.search(
            query, tags=["zircon"], limit=limit, staged=staged, group_by_document=group_by_document, now=NOW
        )
        assert len(results) == limit
        assert {_number(r.doc_id) for r in results} <= rare["tag"]
    results = index.search(
        query, tags=["zircon"], limit=RARE + 5, staged=staged, group_by_document=group_by_document, now=NOW
    )
    assert {_number(r.doc_id) for r in results} == rare["tag"]  # all that match, no more


@pytest.mark.slow
@pytest.mark.parametrize("staged", [False, True])
def test_rare_collection_and_date_filters_fill_the_limit(big_index, staged):
    index, rare = big_index
    by_collection = index.search("server tunnel", collection="tiny", limit=15, staged=staged, now=NOW)
    assert len(by_collection) == 15 and {_number(r.doc_id) for r in by_collection} <= rare["collection"]
    by_date = index.search(
        "server tunnel", since="2020-01-01", until="2020-12-31", limit=15, staged=staged, now=NOW
    )
    assert len(by_date) == 15 and {_number(r.doc_id) for r in by_date} <= rare["date"]
    assert index.search("server", collection="tiny", tags=["zircon"], limit=5, now=NOW) == []


@pytest.mark.slow
def test_rare_filter_results_are_the_best_of_the_allowed_set(big_index):
    """Pushed-down filtering ranks the allowed rows exactly like a search over them alone:
    the filtered top 5 of pure vector search = the 5 best cosine scores among the 20 rare chunks."""
    import numpy as np

    index, rare = big_index
    query = "backup storage network"
    results = index.search(query, tags=["zircon"], mode="vector", decay=0, limit=5, now=NOW)
    model = index.choose_model(None, None)
    ids = np.asarray(sorted(rare["tag"]), dtype=np.int64)
    chunk_ids = index.snapshot().generation.chunk_ids[ids]  # one chunk per memory, in id order
    _, scores = index.dense[model].score_ids(
        index.query_models.query_vector(index.snapshot(), model, query), chunk_ids
    )
    best = [f"m{ids[i]:05d}" for i in np.lexsort((ids, -scores))[:5]]
    assert [r.doc_id for r in results] == best
