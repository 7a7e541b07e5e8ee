"""Read-your-write by rare words (issue 28, item 6): a memory stored with a token no other memory
holds is found first by a search for that token, even where dense-only hits score above it.

The index: 600 filler memories of common words plus distractors built from pieces of the token
(`vexlorq`, `vex lor qa`, ...), so the dense model (fast `wordllama` vectors) puts them nearest to
the token, and the memory holding the token is long and about something else (it is the dense
run's last row). Above 500 chunks the default alpha is 0.6, where BM25's single row (min-max 1.0,
weight 0.4) loses to the dense-nearest distractors (weight 0.6) without the rare-term lift.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from hybridlab.config import IndexConfig, SearchConfig, load_config_file
from hybridlab.search.evidence import rare_term_lift, rarest_term

NOW = "2026-11-01T00:00:00Z"
DAY = "2026-10-01T12:00:00Z"
TOKEN = "vexlorqa"
DISTRACTORS = [
    "vexlorq vexlorq vexlorq build token",
    "vex lor qa vex lor qa",
    "Vexlorqi and vexlorqo are the two test hosts.",
    "The staging token for the build farm is vexlorq and rotates weekly.",
    "Vexlor is the codename of the payments rewrite.",
    "The qa team tags flaky tests with vex-lor so they get retried.",
    "Lorqa, the internal chat bot, answers on-call questions.",
    "The vex cluster hosts the queue workers; lorqa runs beside it.",
]
WORDS = [
    "router",
    "laptop",
    "cable",
    "printer",
    "garage",
    "shelf",
    "vault",
    "password",
    "backup",
    "disk",
    "server",
    "deploy",
    "token",
    "build",
    "test",
    "host",
    "queue",
    "worker",
    "cluster",
    "payment",
    "rewrite",
    "chat",
    "bot",
    "call",
    "weekly",
    "rotate",
    "farm",
    "tag",
    "retry",
    "flaky",
    "stage",
    "admin",
    "family",
    "winter",
    "tyre",
    "box",
]
STORED = (
    f"Moved the spare router, two old laptops, a box of cables, the printer and winter tyres from the hall "
    f"closet to the garage shelves on Saturday; the router is labelled {TOKEN} and its admin password is "
    f"kept in the family vault."
)


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """(index folder, id of the memory holding TOKEN): the filler and distractors built as a segment,
    the token's memory stored after them through the MemoryWriter (in the write-ahead log)."""
    from hybridlab.index.write.build import apply_changes
    from hybridlab.index.write.memory import MemoryWriter, make_memory

    root = tmp_path_factory.mktemp("rare-word")
    rng = random.Random(0)
    filler = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20))) for _ in range(600)]
    documents = [
        make_memory(text, [], created_at=DAY, memory_id=f"m{i:03d}")
        for i, text in enumerate(DISTRACTORS + filler)
    ]
    apply_changes(
        root / "index",
        [("mcp:memories", documents, False)],
        IndexConfig(models=("wordllama",), late_models=()),  # the first stage's lift (its scores)
        progress=False,
        cache_path=root / "embeddings.duckdb",
    )
    writer = MemoryWriter(root / "index", wal_records=64)
    try:
        memory = writer.store(STORED, created_at=DAY)  # same age as the rest: recency does not decide
    finally:
        writer.close()
    return root / "index", memory.id


@pytest.fixture(scope="module")
def index(stored):
    from hybridlab.search.engine import open_index

    opened = open_index(stored[0])
    yield opened
    opened.close()


def test_a_stored_unique_token_is_found_first_right_after_the_store(index, stored):
    _, memory_id = stored
    # alpha 0.6 pinned: at a memory store's default 0.5 BM25 alone already ranks it first (no lift needed)
    results = index.search(TOKEN, limit=10, now=NOW, explain=True, alpha=0.6)
    first = results[0].explain
    assert results[0].doc_id == memory_id
    assert (first["rare_term"], first["rare_term_df"], first["rare_term_rows"]) == (TOKEN, 1, 1)
    assert first["bm25_rank"] == 1 and first["rare_term_lift"] > 0
    assert first["alpha"] == 0.6 and first["rare_term_max_df"] == SearchConfig().rare_term_max_df
    # every other hit is dense-only, and the lift put the memory just above the best of them
    assert all(r.explain["bm25_rank"] is None and r.explain["rare_term_lift"] == 0.0 for r in results[1:])
    assert results[0].score == pytest.approx(results[1].score + 1e-6)
    # without the lift the dense-nearest distractors outrank it: what the rule is for
    off = index.search(TOKEN, limit=10, now=NOW, rare_term_max_df=0, explain=True, alpha=0.6)
    assert off[0].doc_id != memory_id and memory_id in [r.doc_id for r in off]
    assert off[0].explain["rare_term"] == TOKEN and off[0].explain["rare_term_rows"] == 0
    assert [r.doc_id for r in index.search(TOKEN, limit=10, now=NOW, adaptive_fusion=False, alpha=0.6)] == [
        r.doc_id for r in off
    ]


def test_no_lift_where_the_rare_term_is_a_small_part_of_the_query(index, stored):
    """Words the memory lacks (three the index never saw, or "flaky" it has): the memory holding
    the token does not match the query fully, so fusion alone decides."""
    results = index.search(f"{TOKEN} zebra giraffe okapi", limit=10, now=NOW, explain=True)
    assert results[0].explain["rare_term"] == TOKEN and results[0].explain["rare_term_rows"] == 0
    assert all(r.explain["rare_term_lift"] == 0.0 for r in results)
    partial = index.search(f"{TOKEN} flaky", limit=10, now=NOW, explain=True)
    assert partial[0].explain["rare_term"] == TOKEN and partial[0].explain["rare_term_rows"] == 0
    full = index.search(f"{TOKEN} printer", limit=10, now=NOW, explain=True)  # the memory holds both
    assert full[0].doc_id == stored[1] and full[0].explain["rare_term_rows"] == 1


def test_no_lift_for_a_term_more_chunks_hold(index):
    results = index.search("router", limit=5, now=NOW, explain=True)
    assert results[0].explain["rare_term"] == "router" and results[0].explain["rare_term_df"] > 3
    assert results[0].explain["rare_term_rows"] == 0


def test_a_filter_that_excludes_the_memory_leaves_no_lifted_row(index, stored):
    results = index.search(TOKEN, limit=5, now=NOW, until="2026-09-01", explain=True)
    assert results == [] or all(r.explain["rare_term_rows"] == 0 for r in results)


def test_rarest_term_is_the_fewest_held_first_in_query_order():
    assert rarest_term({"a": 5, "b": 2, "c": 2, "d": 0}) == ("b", 2)
    assert rarest_term({"a": 0}) == (None, None)
    assert rarest_term({}) == (None, None)


def test_rare_term_lift_by_hand():
    scores = np.array([0.6, 0.5, 0.45, 0.4, 0.2])
    rare = np.array([False, False, False, True, False])
    lexical = np.array([False, True, False, True, False])  # row 1 is a lexical match without the term
    # unmatched rows 0, 2, 4: their best 0.6; the rare row 0.4 -> +0.2 + gap; row 1 is not a bar
    assert rare_term_lift(scores, rare, lexical, gap=0.01) == pytest.approx(0.6 - 0.4 + 0.01)
    # already above every unmatched row by more than the gap: nothing
    assert rare_term_lift(np.array([0.9, 0.5]), np.array([True, False]), np.array([True, False])) == 0.0
    # one amount for all rare rows, set by the lowest of them
    two = np.array([True, False, True])
    assert rare_term_lift(np.array([0.3, 0.5, 0.1]), two, two, gap=0.0) == pytest.approx(0.4)
    # no unmatched row, or no rare row: nothing
    assert rare_term_lift(scores, np.ones(5, bool), np.zeros(5, bool)) == 0.0
    assert rare_term_lift(scores, np.zeros(5, bool), np.zeros(5, bool)) == 0.0


@pytest.mark.parametrize("value", [-1, 1.5, True, "3"])
def test_rare_term_max_df_must_be_a_non_negative_integer(value):
    with pytest.raises(ValueError, match="rare_term_max_df must be an integer >= 0"):
        SearchConfig(rare_term_max_df=value)


def test_an_exported_config_from_before_the_setting_keeps_it_off(tmp_path):
    path = tmp_path / "best.json"
    path.write_text('{"search": {"alpha": 0.5}, "provenance": {"dataset": "memories"}}')
    assert load_config_file(path)["search"]["rare_term_max_df"] == 0
