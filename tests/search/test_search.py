"""The hybrid engine's rules, on a small hand-written memory store (fast `wordllama` vectors).

Memories (invented for this test): project `tunnelx` talks about ports, TLS and systemd but is tagged
`tunnelx`; projects `cachelib` and `searchy` talk about their "codebase architecture"; a near-identical
pair of endpoint memories differs only in date; one old memory is the only one about an axolotl tank,
among newer filler memories.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from hybridlab import cli
from hybridlab.config import IndexConfig, SearchConfig
from hybridlab.search.engine import open_index

NOW = "2026-11-01T00:00:00Z"
MEMORIES = [
    (
        "m01",
        "Tunnel server listens on port 2333 with TLS over the noise transport; systemd restarts both ends.",
        ["tunnelx", "networking"],
        "2024-01-10",
        "tunnelx",
    ),
    (
        "m02",
        (
            "How the tunnel fits together: a client half and a server half, forwarded services listed in "
            "server.toml."
        ),
        ["tunnelx", "architecture"],
        "2024-01-12",
        "tunnelx",
    ),
    (
        "m03",
        "Public endpoint of the tunnel server is 203.0.113.5 on a small VPS in Falkenstein.",
        ["tunnelx", "hosting"],
        "2024-02-01",
        "tunnelx",
    ),
    (
        "m04",
        "Public endpoint of the tunnel server is now 198.51.100.7 on a small VPS in Nuremberg.",
        ["tunnelx", "hosting"],
        "2026-09-01",
        "tunnelx",
    ),
    (
        "m05",
        (
            "Overview of the cachelib codebase architecture: a small core with pluggable backends, project "
            "layout under src/."
        ),
        ["cachelib", "architecture"],
        "2024-03-01",
        "cachelib",
    ),
    (
        "m06",
        "The cachelib project codebase has a layered architecture with a serializer module.",
        ["cachelib", "architecture"],
        "2024-03-05",
        "cachelib",
    ),
    (
        "m07",
        "searchy project codebase architecture: tokenizer, inverted index and query planner modules.",
        ["searchy", "architecture", "project-structure"],
        "2024-03-10",
        "searchy",
    ),
    (
        "m08",
        "Release process for searchy: tag the commit, build wheels, publish to the package index.",
        ["searchy", "release_process"],
        "2025-05-01",
        "searchy",
    ),
    ("m09", "User prefers short answers without emoji.", ["style"], "2025-01-01", None),
    ("m10", "The aquarium heater for the axolotl tank is set to 17 degrees.", ["pets"], "2023-01-01", None),
    (
        "m11",
        "API gateway throttles clients at 50 requests per second.",
        ["rate limiting", "cachelib"],
        "2025-06-01",
        "cachelib",
    ),
    (
        "m12",
        "Burst limits are configured per access token.",
        ["rate-limiting", "searchy"],
        "2025-06-02",
        "searchy",
    ),
]
FILLER = [
    "Weekly groceries: oats, lentils, coffee beans and oranges.",
    "Tomato seedlings go outside after the last frost.",
    "The bike needs a new chain before the spring ride.",
    "Dentist appointment moved to Thursday morning.",
    "Sourdough starter is fed twice a day with rye flour.",
    "The living room lamp uses a warm white bulb.",
    "Library books are due back on the first of the month.",
    "Houseplants get watered every Sunday evening.",
]


def write_memories(path: Path) -> Path:
    rows = []
    for memory_id, content, tags, day, project in MEMORIES:
        rows.append(
            {
                "id": memory_id,
                "content": content,
                "tags": tags,
                "created_at": f"{day}T12:00:00Z",
                "metadata": {"project": project} if project else {"scope": "user"},
            }
        )
    for i, content in enumerate(FILLER):
        rows.append(
            {
                "id": f"f{i:02d}",
                "content": content,
                "tags": ["home"],
                "created_at": f"2026-10-{10 + i:02d}T12:00:00Z",
                "memory_type": "fact",
            }
        )
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def memory_index_dir(tmp_path_factory) -> Path:
    from hybridlab.index.write.build import index_paths

    root = tmp_path_factory.mktemp("memory-index")
    source = write_memories(root / "memories.jsonl")
    index_paths(
        [source],
        root / "index",
        # the first stage's semantics (scores, formulas, ranks): the second stage has tests/search/test_late.py
        IndexConfig(models=("wordllama",), late_models=()),
        progress=False,
        cache_path=root / "embeddings.duckdb",
    )
    return root / "index"


@pytest.fixture(scope="module")
def index(memory_index_dir):
    opened = open_index(memory_index_dir)
    yield opened
    opened.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """No HYBRIDLAB_* setting of the caller's shell leaks into these tests."""
    import os

    for name in list(os.environ):
        if name.startswith("HYBRIDLAB_"):
            monkeypatch.delenv(name)


def ids(results) -> list[str]:
    return [r.doc_id for r in results]


# ------------------------------------------------------------------ alpha, fusion, depth
def test_alpha_one_is_exactly_the_pure_vector_ranking(index):
    query = "where does the tunnel server run"
    vector = ids(index.search(query, mode="vector", limit=15, now=NOW))
    for fusion in ("rrf", "convex", "dbsf"):
        assert ids(index.search(query, alpha=1.0, fusion=fusion, limit=15, now=NOW)) == vector


def test_env_alpha_one_is_exactly_the_pure_vector_ranking(index, monkeypatch):
    query = "tunnelx project codebase architecture"  # names a tag: alpha 1.0 must silence it too
    vector = ids(index.search(query, mode="vector", limit=15, now=NOW))
    monkeypatch.setenv("HYBRIDLAB_ALPHA", "1.0")
    results = index.search(query, limit=15, now=NOW, explain=True)
    assert ids(results) == vector
    assert results[0].explain["alpha"] == 1.0 and results[0].explain["alpha_source"] == "env"


def test_alpha_zero_without_tags_is_the_bm25_ranking(index):
    query = "public endpoint of the tunnel server"
    bm25 = ids(index.search(query, mode="bm25", limit=5, now=NOW))
    assert ids(index.search(query, alpha=0.0, tags=[], limit=5, now=NOW)) == bm25


def test_alpha_source_argument_config_adaptive(memory_index_dir):
    with open_index(memory_index_dir, {"search": {"alpha": 0.3}}) as configured:
        explained = configured.search("tunnel", explain=True, now=NOW)[0].explain
        assert (explained["alpha"], explained["alpha_source"]) == (0.3, "config")
        explained = configured.search("tunnel", alpha=0.9, explain=True, now=NOW)[0].explain
        assert (explained["alpha"], explained["alpha_source"]) == (0.9, "argument")
    with open_index(memory_index_dir) as plain:
        explained = plain.search("tunnel", explain=True, now=NOW)[0].explain
        assert (explained["alpha"], explained["alpha_source"]) == (0.5, "adaptive")  # 20 chunks < 500


def test_unknown_fusion_lists_the_choices(index):
    with pytest.raises(
        ValueError, match=r"unknown fusion 'borda'; choose from \['convex', 'dbsf', 'learned', 'rrf'\]"
    ):
        index.search("tunnel", fusion="borda")


def test_depth_bounds_each_retriever_and_is_separate_from_limit(index):
    from hybridlab.search.engine import resolve_now
    from hybridlab.search.filters import Filters

    outcome = index._retrieve(
        "tunnel server endpoint", {"depth": 3, "limit": 2, "staged": False}, Filters(), None, resolve_now(NOW)
    )
    assert len(outcome.runs["dense"]) == 3 and len(outcome.runs["bm25"]) == 3
    assert len(index.search("tunnel server endpoint", depth=3, limit=2, now=NOW)) == 2


# ------------------------------------------------------------------ tags
def test_project_query_returns_the_tagged_project_first(index):
    """The motivating failure: the tunnelx memories talk about ports and TLS, the other projects'
    memories about "codebase architecture"; the tag signal must put tunnelx first."""
    query = "tunnelx project codebase architecture"
    without_tags = index.search(query, tags=[], limit=3, now=NOW)
    assert without_tags[0].collection != "tunnelx"  # the failure the tag signal fixes
    results = index.search(query, limit=4, now=NOW, explain=True)
    assert [r.collection for r in results[:2]] == ["tunnelx", "tunnelx"]
    assert results[0].doc_id == "m02"  # carries both query tags: tunnelx and architecture
    assert results[0].explain["matched_tags"] == ["architecture", "tunnelx"]
    assert results[0].explain["query_collections"] == ["tunnelx"]


def test_no_matching_tag_gives_exactly_the_tagless_ranking(index):
    query = "what is the tunnel endpoint address"  # no word is a tag or collection here
    extracted = index.search(query, limit=20, now=NOW, explain=True)
    assert extracted[0].explain["query_tags"] == [] and extracted[0].explain["query_collections"] == []
    off = index.search(query, tags=[], limit=20, now=NOW)
    assert [(r.doc_id, r.score) for r in extracted] == [(r.doc_id, r.score) for r in off]


def test_explicit_tags_filter_all_of_or_any_of(index):
    all_of = index.search("configuration", tags=["searchy", "Release-Process"], limit=10, now=NOW)
    assert ids(all_of) == ["m08"]  # `Release-Process` matches the index's `release_process`
    any_of = index.search("configuration", tags=["rate_limiting", "pets"], tags_any=True, limit=10, now=NOW)
    assert sorted(ids(any_of)) == ["m10", "m11", "m12"]  # both spellings of `rate limiting`


def test_three_matched_query_terms_raise_the_tag_weight(index):
    two = index.search("searchy architecture", limit=1, now=NOW, explain=True)[0].explain
    three = index.search("searchy architecture project structure", limit=1, now=NOW, explain=True)[0].explain
    assert two["tag_boost"] == 1.0
    assert three["tag_boost"] == 1.5  # searchy + architecture + the two-word tag project-structure
    assert two["tag_coverage"] == three["tag_coverage"] == 1.0
    partial = index.search("searchy tokenizer modules", limit=1, now=NOW, explain=True)[0].explain
    assert partial["tag_coverage"] == pytest.approx(1 / 3)


def test_a_candidate_keeps_its_tag_score_beyond_the_tag_runs_depth(index):
    """Eight filler memories wear `home`; with depth 3 the tag run holds three of them, but the one
    BM25 finds (the newest of them) must still get its tag bonus under score fusion."""
    results = index.search("home houseplants watered", depth=3, limit=3, now=NOW, explain=True)
    assert results[0].doc_id == "f07"
    assert results[0].explain["matched_tags"] == ["home"] and results[0].explain["tag_score"] > 0
    rrf = index.search("home houseplants watered", depth=3, limit=3, now=NOW, fusion="rrf")
    assert rrf[0].doc_id == "f07"


def test_tag_run_disabled_by_empty_tags(index):
    explained = index.search("tunnelx architecture", tags=[], limit=1, now=NOW, explain=True)[0].explain
    assert explained["query_tags"] == [] and explained["tag_score"] is None


# ------------------------------------------------------------------ recency
def test_newest_of_near_identical_memories_wins_under_a_recency_weight(index):
    """Recency is off by default (`recency_weight` 0: an old memory that answers is not sunk by its
    age; the recency intent of "current", "latest" ... still weighs it): with a weight the newer of
    two near-identical memories comes first."""
    plain = index.search("public endpoint of the tunnel server", limit=2, now=NOW)
    assert ids(plain) == ["m03", "m04"]  # the closer wording first, whatever its age
    results = index.search(
        "public endpoint of the tunnel server", limit=2, now=NOW, explain=True, recency_weight=0.2
    )
    assert ids(results) == ["m04", "m03"]
    assert results[0].explain["recency_factor"] > results[1].explain["recency_factor"]
    # with recency off the older one is not behind because of its age alone
    assert index.search("public endpoint of the tunnel server", decay=0, limit=2, now=NOW)[
        0
    ].score == pytest.approx(max(r.explain["fused_score"] for r in results))


def test_only_relevant_old_memory_still_ranks_first(index):
    results = index.search(
        "axolotl aquarium heater temperature", limit=5, now=NOW, explain=True, recency_weight=0.2
    )
    assert results[0].doc_id == "m10"
    assert results[0].explain["recency_factor"] < 0.1  # 3.8 years old: decayed almost to 0 ...
    assert all(r.explain["recency_factor"] > 0.9 for r in results[1:3])  # ... against fresh filler


def test_recency_factor_formula(index):
    results = index.search(
        "axolotl aquarium heater", limit=1, now=NOW, decay=0.01, recency_weight=0.5, explain=True
    )
    explained = results[0].explain
    import math

    days = (1_793_491_200 - 1_672_574_400) / 86400  # 2026-11-01T00:00Z - 2023-01-01T12:00Z
    assert explained["recency_factor"] == pytest.approx(math.exp(-0.01 * days))
    assert explained["final_score"] == pytest.approx(
        explained["fused_score"] * (0.5 + 0.5 * math.exp(-0.01 * days))
    )


def test_now_from_env_equals_now_argument(index, monkeypatch):
    query = "public endpoint of the tunnel server"
    weighted = {"limit": 5, "recency_weight": 0.2}
    expected = [(r.doc_id, r.score) for r in index.search(query, now="2024-03-01", **weighted)]
    monkeypatch.setenv("HYBRIDLAB_NOW", "2024-03-01")
    assert [(r.doc_id, r.score) for r in index.search(query, **weighted)] == expected
    # in early 2024 the 2026 endpoint lies in the future: its age is clipped to 0, factor 1
    assert expected != [(r.doc_id, r.score) for r in index.search(query, now=NOW, **weighted)]


def test_recency_decay_env_alias(index, monkeypatch):
    monkeypatch.setenv("HYBRIDLAB_RECENCY_DECAY", "0")
    explained = index.search("tunnel server", limit=1, now=NOW, explain=True)[0].explain
    assert explained["decay"] == 0.0 and explained["final_score"] == explained["fused_score"]


# ------------------------------------------------------------------ filters
def test_unknown_chunk_type_and_collection_list_the_choices(index):
    with pytest.raises(ValueError, match=r"unknown chunk type 'poem'; this index has \['memory'\]"):
        index.search("tunnel", chunk_types=["poem"])
    with pytest.raises(
        ValueError,
        match=r"unknown collection 'nope'; this index has \['cachelib', 'memories', "
        r"'searchy', 'tunnelx'\]",
    ):
        index.search("tunnel", collection="nope")


def test_collection_date_and_min_score_filters(index):
    results = index.search("architecture", collection="cachelib", limit=10, now=NOW)
    assert {r.collection for r in results} == {"cachelib"} and len(results) == 3
    dated = index.search("tunnel server", since="2025-01-01", until="2026-09-30", limit=30, now=NOW)
    assert dated and all("2025-01-01" <= r.updated_at[:10] <= "2026-09-30" for r in dated)
    everything = index.search("tunnel server", limit=30, now=NOW)
    assert everything[2].score > everything[3].score
    threshold = (everything[2].score + everything[3].score) / 2
    kept = index.search("tunnel server", limit=30, now=NOW, min_score=threshold)
    assert ids(kept) == ids(everything[:3])


def test_embedding_model_filter(index):
    assert len(index.search("tunnel", embedding_model="wordllama", limit=50, now=NOW)) == 20
    with pytest.raises(ValueError, match="has no vectors of"):
        index.search("tunnel", embedding_model="all-MiniLM-L6-v2")


# ------------------------------------------------------------------ staged mode
def test_staged_scores_bm25_candidates_with_stored_vectors(index):
    from hybridlab.search.engine import resolve_now
    from hybridlab.search.filters import Filters

    options = {"staged": True, "candidates": 6, "fallback_threshold": 2, "limit": 3, "expand_hops": 0}
    outcome = index._retrieve(
        "the tunnel server public endpoint", dict(options), Filters(), [], resolve_now(NOW)
    )
    assert outcome.mode == "staged" and outcome.graph_added == 0
    assert set(outcome.runs["dense"]) <= set(outcome.runs["bm25"])  # no vector outside the candidates
    assert len(outcome.runs["bm25"]) <= 6
    results = index.search("the tunnel server public endpoint", tags=[], explain=True, now=NOW, **options)
    assert results[0].explain["mode"] == "staged"


def test_staged_grows_its_pool_along_the_corpus_graph(index):
    from hybridlab.search.engine import resolve_now
    from hybridlab.search.filters import Filters

    options = {
        "staged": True,
        "candidates": 3,
        "fallback_threshold": 1,
        "limit": 3,
        "expand_hops": 1,
        "expand_seeds": 2,
    }
    outcome = index._retrieve(
        "the tunnel server public endpoint", dict(options), Filters(), [], resolve_now(NOW)
    )
    model = outcome.model
    bm25_rows = set(outcome.runs["bm25"])
    extra = set(outcome.runs["dense"]) - bm25_rows
    assert outcome.mode == "staged" and extra and outcome.graph_added == len(extra)
    # every added row is a graph neighbour of one of the two best-scoring BM25 candidates
    to_index = index.snapshot().generation.dense_rows_to_index[model]
    dense_row = {int(r): d for d, r in enumerate(to_index)}
    seeds = sorted(bm25_rows, key=lambda r: -outcome.runs["dense"][r])[:2]
    neighbours = {
        int(to_index[n])
        for s in seeds
        for n in index.snapshot().generation.graphs[model][dense_row[s]]
        if n >= 0
    }
    assert extra <= neighbours
    # the added rows carry their exact cosine
    vector = index.query_models.query_vector(index.snapshot(), model, "the tunnel server public endpoint")
    for row in extra:
        expected = float(index.dense[model].vectors[dense_row[row]] @ vector)
        assert outcome.runs["dense"][row] == pytest.approx(expected, abs=1e-5)
    explained = index.search("the tunnel server public endpoint", tags=[], explain=True, now=NOW, **options)
    assert explained[0].explain["staged_pool"]["graph_added"] == len(extra)


def test_fill_dense_gives_bm25_only_candidates_their_exact_cosine(index):
    from hybridlab.search.engine import resolve_now
    from hybridlab.search.filters import Filters

    query, options = "tunnel server endpoint", {"staged": False, "depth": 1, "limit": 1}
    plain = index._retrieve(query, dict(options), Filters(), [], resolve_now(NOW))
    bm25_only = set(plain.runs["bm25"]) - set(plain.runs["dense"])
    assert bm25_only, "BM25's best (m03) is not the dense retriever's best (m04) here"
    filled = index._retrieve(query, dict(options, fill_dense=True), Filters(), [], resolve_now(NOW))
    assert set(filled.runs["dense"]) == set(plain.runs["dense"]) | set(plain.runs["bm25"])
    vector = index.query_models.query_vector(index.snapshot(), filled.model, query)
    dense = index.dense[filled.model]
    for row in bm25_only:
        expected = float(
            dense.vectors[int(np.searchsorted(dense.ids, index.snapshot().generation.chunk_ids[row]))]
            @ vector
        )
        assert filled.runs["dense"][row] == pytest.approx(expected, abs=1e-5)
    for row, score in plain.runs["dense"].items():
        assert filled.runs["dense"][row] == score


def test_fill_dense_is_auto_on_above_the_staged_threshold(index):
    query = "tunnel server endpoint"
    small = index.search(query, explain=True, now=NOW, limit=1)[0].explain
    assert small["fill_dense"] is False and small["mode"] == "parallel"  # the fixture index is small
    large = index.search(query, explain=True, now=NOW, limit=1, staged_threshold=1, fallback_threshold=1)[
        0
    ].explain
    assert large["fill_dense"] is True and large["mode"] == "staged"
    assert large["staged_pool"]["expand_hops"] == 3 and large["staged_pool"]["graph"] is True
    forced = index.search(query, explain=True, now=NOW, limit=1, staged_threshold=1, fill_dense=False)[
        0
    ].explain
    assert forced["fill_dense"] is False


def test_staged_graph_expansion_keeps_filters(index):
    results = index.search(
        "tunnel server",
        staged=True,
        candidates=2,
        fallback_threshold=1,
        expand_hops=3,
        expand_seeds=5,
        collection="tunnelx",
        tags=[],
        limit=3,
        explain=True,
        now=NOW,
    )
    assert results[0].explain["mode"] == "staged"
    assert len(results) == 3 and all(r.collection == "tunnelx" for r in results)


def test_staged_falls_back_when_bm25_finds_too_little(index, caplog):
    with caplog.at_level(logging.INFO, logger="hybridlab.search.engine"):
        results = index.search("axolotl", staged=True, limit=3, explain=True, now=NOW)
    assert results[0].explain["mode"] == "fallback" and len(results) == 3
    assert "fell back to parallel hybrid" in caplog.text


def test_staged_auto_enables_above_the_threshold(index):
    auto = index.search(
        "tunnel server", staged_threshold=10, limit=1, explain=True, fallback_threshold=1, now=NOW
    )
    assert auto[0].explain["mode"] == "staged"  # 20 chunks > 10
    assert index.search("tunnel server", limit=1, explain=True, now=NOW)[0].explain["mode"] == "parallel"
    explicit = index.search(
        "tunnel server", staged=False, staged_threshold=10, limit=1, explain=True, now=NOW
    )
    assert explicit[0].explain["mode"] == "parallel"


def test_explain_has_every_field(index):
    explained = index.search("tunnelx architecture", limit=1, explain=True, now=NOW)[0].explain
    for key in (
        "dense_score",
        "dense_rank",
        "bm25_score",
        "bm25_rank",
        "matched_tags",
        "tag_boost",
        "recency_factor",
        "fused_score",
        "final_score",
        "fusion",
        "alpha",
        "alpha_source",
        "mode",
    ):
        assert key in explained, key
    assert explained["fusion"] == "convex" and explained["mode"] == "parallel"


# ------------------------------------------------------------------ CLI
def test_cli_search_flags(capsys, memory_index_dir):
    code = cli.main(
        [
            "search",
            "tunnelx project codebase architecture",
            "--index",
            str(memory_index_dir),
            "--json",
            "--explain",
            "--now",
            NOW,
            "--fusion",
            "rrf",
            "--rrf-k",
            "10",
            "--limit",
            "2",
        ]
    )
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and len(payload) == 2
    explained = payload[0]["explain"]
    assert (explained["fusion"], explained["rrf_k"], explained["alpha_source"]) == ("rrf", 10, "adaptive")
    assert explained["query_tags"] == ["tunnelx", "architecture"]


def test_cli_filters_and_alpha(capsys, memory_index_dir):
    code = cli.main(
        [
            "search",
            "limits",
            "--index",
            str(memory_index_dir),
            "--json",
            "--tag",
            "rate limiting",
            "--tag",
            "pets",
            "--tags-any",
            "--alpha",
            "1.0",
            "--no-staged",
            "--now",
            NOW,
            "--explain",
        ]
    )
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and sorted(r["doc_id"] for r in payload) == ["m10", "m11", "m12"]
    assert payload[0]["explain"]["alpha_source"] == "argument"


def test_cli_unknown_collection_is_a_one_line_error(capsys, memory_index_dir):
    code = cli.main(["search", "tunnel", "--index", str(memory_index_dir), "--collection", "nope"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: unknown collection 'nope'") and "\n" not in err


def test_search_by_tag_newest_first_and_variant_spelling(index):
    assert [d.doc_id for d in index.search_by_tag(["Architecture"])] == ["m07", "m06", "m05", "m02"]
    assert [d.doc_id for d in index.search_by_tag(["rate_limiting"], match="any")] == ["m12", "m11"]


def test_staged_falls_back_when_its_candidates_cannot_fill_the_limit(index):
    # "tunnel" occurs in 4 memories: enough for fallback_threshold 2, not for 15 results
    results = index.search(
        "tunnel", staged=True, fallback_threshold=2, limit=15, tags=[], explain=True, now=NOW, expand_hops=0
    )
    assert len(results) == 15 and results[0].explain["mode"] == "fallback"
    # the corpus graph can fill the limit from the 4 candidates' neighbours without a parallel search
    grown = index.search(
        "tunnel", staged=True, fallback_threshold=2, limit=15, tags=[], explain=True, now=NOW, expand_hops=3
    )
    assert len(grown) == 15 and grown[0].explain["mode"] == "staged"
    few = index.search("tunnel", staged=True, fallback_threshold=2, limit=3, tags=[], explain=True, now=NOW)
    assert few[0].explain["mode"] == "staged"


# ------------------------------------------------------------------ adaptive fusion (issue 19)
def test_weak_lexical_evidence_takes_bm25_out_of_the_fusion(index):
    # one common word ("server") matched of many the corpus lacks: BM25's list is noise here
    query = "which machine abroad relays my inbound connections to the server"
    [top] = index.search(query, limit=1, now=NOW, explain=True)
    evidence = top.explain
    assert evidence["lexical_evidence"] < SearchConfig().lexical_floor
    assert evidence["lexical_factor"] == 0.0
    adaptive = index.search(query, limit=5, now=NOW)
    without_bm25 = index.search(query, limit=5, now=NOW, adaptive_fusion=False, tag_weight=0.0, alpha=1.0)
    assert ids(adaptive) == ids(without_bm25)  # no tag named either: exactly the dense ranking
    fixed = index.search(query, limit=1, now=NOW, adaptive_fusion=False, explain=True)[0].explain
    assert fixed["lexical_factor"] == 1.0 and fixed["lexical_evidence"] == evidence["lexical_evidence"]


def test_strong_lexical_evidence_keeps_the_fixed_weights(index):
    query = "tunnel server port 2333 TLS"
    [top] = index.search(query, limit=1, now=NOW, explain=True)
    assert (
        top.explain["lexical_evidence"] >= SearchConfig().lexical_ceiling
        and top.explain["lexical_factor"] == 1.0
    )
    assert ids(index.search(query, limit=5, now=NOW)) == ids(
        index.search(query, limit=5, now=NOW, adaptive_fusion=False)
    )


def test_a_query_for_the_latest_state_weighs_recency_more(index):
    [current] = index.search("current public endpoint of the tunnel server", limit=1, now=NOW, explain=True)
    assert current.explain["recency_intent"] is True
    assert current.explain["recency_weight_used"] == SearchConfig().recency_intent_weight
    [plain] = index.search("public endpoint of the tunnel server", limit=1, now=NOW, explain=True)
    assert plain.explain["recency_intent"] is False
    assert plain.explain["recency_weight_used"] == SearchConfig().recency_weight
    assert current.doc_id == "m04"  # the newer of two near-identical memories


def test_adaptive_fusion_changes_nothing_outside_hybrid_mode(index):
    for mode in ("vector", "bm25"):
        query = "what is the current tunnel endpoint"
        assert ids(index.search(query, mode=mode, now=NOW)) == ids(
            index.search(query, mode=mode, now=NOW, adaptive_fusion=False)
        )


def test_content_gives_each_result_its_chunk_or_its_whole_document(index):
    """content="chunk": the chunk's text (what the snippet is cut from); "full": the document's
    text, as get_document gives it; "snippet" (the default) adds no text; an unknown value is refused."""
    query = "tunnel server public endpoint"
    plain = index.search(query, now=NOW, limit=4)
    assert all(r.text is None and "text" not in r.to_dict() for r in plain)
    chunks = index.search(query, now=NOW, limit=4, content="chunk")
    full = index.search(query, now=NOW, limit=4, content="full")
    assert [r.chunk_id for r in chunks] == [r.chunk_id for r in full] == [r.chunk_id for r in plain]
    for chunk, document in zip(chunks, full):
        assert " ".join(chunk.snippet.split()).strip("…")[:40] in " ".join(chunk.text.split())
        assert document.text == index.get_document(document.doc_id).text
    with pytest.raises(ValueError, match="unknown content 'all'"):
        index.search(query, now=NOW, content="all")
