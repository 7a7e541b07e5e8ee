"""Tests for hybridlab.search.fusion: hand-derived values, invariants, and agreement with ranx."""

from __future__ import annotations

import copy
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybridlab.search.fusion import (
    FUSERS,
    NORMALIZERS,
    THEORETICAL_MIN,
    alpha_weights,
    convex,
    dbsf,
    fuse,
    normalize,
    rank,
    rrf,
)

DENSE = {1: 0.9, 2: 0.5, 3: 0.1}
BM25 = {2: 8.0, 3: 4.0, 4: 2.0}
TAGS = {4: 1.0, 5: 3.0}
RUNS = {"dense": DENSE, "bm25": BM25, "tags": TAGS}
NORMS = sorted(NORMALIZERS)


def ids(scores):
    return [item for item, _ in rank(scores)]


def approx_dict(expected):
    return {item: pytest.approx(value, rel=1e-12, abs=1e-15) for item, value in expected.items()}


# Normalisation ===================================================================================
def test_min_max():
    assert normalize(DENSE, "min-max") == approx_dict(
        {1: (0.9 - 0.1) / (0.9 - 0.1), 2: (0.5 - 0.1) / (0.9 - 0.1), 3: (0.1 - 0.1) / (0.9 - 0.1)}
    )


def test_min_max_all_equal_is_one():
    assert normalize({7: 2.5, 8: 2.5}, "min-max") == {7: 1.0, 8: 1.0}
    assert normalize({7: -3.0}, "min-max") == {7: 1.0}


def test_z_score_population_std():
    scores = {1: 1.0, 2: 2.0, 3: 3.0, 4: 6.0}
    mean = (1 + 2 + 3 + 6) / 4
    std = math.sqrt(((1 - mean) ** 2 + (2 - mean) ** 2 + (3 - mean) ** 2 + (6 - mean) ** 2) / 4)
    assert normalize(scores, "z-score") == approx_dict({k: (v - mean) / std for k, v in scores.items()})
    assert normalize(scores, "z-score")[3] == 0.0


def test_z_score_zero_std_is_zero():
    assert normalize({1: 0.1, 2: 0.1, 3: 0.1}, "z-score") == {1: 0.0, 2: 0.0, 3: 0.0}


def test_theoretical_min_max():
    scores = {1: 0.5, 2: -0.5, 3: 0.2}
    floor = THEORETICAL_MIN["dense"]
    assert floor == -1.0
    assert normalize(scores, "theoretical-min-max", theoretical_min=floor) == approx_dict(
        {1: (0.5 + 1) / (0.5 + 1), 2: (-0.5 + 1) / (0.5 + 1), 3: (0.2 + 1) / (0.5 + 1)}
    )


def test_theoretical_min_max_guard_and_bm25_floor():
    assert normalize({1: 0.0, 2: 0.0}, "theoretical-min-max", theoretical_min=0.0) == {1: 0.0, 2: 0.0}
    assert normalize(BM25, "theoretical-min-max", theoretical_min=0.0) == approx_dict(
        {2: 8.0 / 8.0, 3: 4.0 / 8.0, 4: 2.0 / 8.0}
    )


def test_theoretical_min_max_needs_floor_below_max():
    with pytest.raises(ValueError, match="theoretical_min"):
        normalize(BM25, "theoretical-min-max")
    with pytest.raises(ValueError, match="below the theoretical minimum"):
        normalize({1: -3.0, 2: -2.0}, "theoretical-min-max", theoretical_min=-1.0)
    # a score below the floor is not clipped
    assert normalize({1: -2.0, 2: 1.0}, "theoretical-min-max", theoretical_min=-1.0)[1] == (-2 + 1) / (1 + 1)


def test_none_is_identity_copy():
    out = normalize(DENSE, "none")
    assert out == DENSE and out is not DENSE


@pytest.mark.parametrize("method", NORMS)
def test_normalize_empty(method):
    assert normalize({}, method, theoretical_min=0.0) == {}


def test_unknown_normalization():
    with pytest.raises(ValueError, match=r"unknown normalization 'l2'; choose from \['min-max', 'none'"):
        normalize(DENSE, "l2")
    with pytest.raises(ValueError, match="unknown normalization"):
        fuse("convex", RUNS, {"dense": 1.0}, normalization="minmax")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_scores_rejected(bad):
    with pytest.raises(ValueError, match="'bm25'"):
        fuse("rrf", {"dense": DENSE, "bm25": {**BM25, 9: bad}}, {"dense": 1.0, "bm25": 1.0})
    with pytest.raises(ValueError, match="non-finite"):
        normalize({1: bad}, "none")


# RRF =============================================================================================
def test_rrf_hand_values_missing_items():
    out = rrf({"dense": DENSE, "bm25": BM25}, {"dense": 0.5, "bm25": 0.5})
    assert out == approx_dict(
        {
            1: 0.5 / (60 + 1),
            2: 0.5 / (60 + 2) + 0.5 / (60 + 1),
            3: 0.5 / (60 + 3) + 0.5 / (60 + 2),
            4: 0.5 / (60 + 3),
        }
    )
    assert ids(out) == [2, 3, 1, 4]


def test_rrf_weighted_and_rrf_k():
    out = rrf({"dense": DENSE, "bm25": BM25}, {"dense": 0.8, "bm25": 0.2}, rrf_k=10)
    assert out == approx_dict(
        {
            1: 0.8 / (10 + 1),
            2: 0.8 / (10 + 2) + 0.2 / (10 + 1),
            3: 0.8 / (10 + 3) + 0.2 / (10 + 2),
            4: 0.2 / (10 + 3),
        }
    )


def test_rrf_ties_ranked_by_id():
    # scores 1.0, 1.0, 0.5: the tie between ids 5 and 3 is broken by ascending id -> 3 first
    out = rrf({"bm25": {5: 1.0, 3: 1.0, 9: 0.5}}, {"bm25": 1.0})
    assert out == approx_dict({3: 1 / (60 + 1), 5: 1 / (60 + 2), 9: 1 / (60 + 3)})


def test_rrf_weight_zero_and_missing_weight_ignored():
    out = rrf(RUNS, {"dense": 1.0, "bm25": 0.0})  # tags has no weight
    assert out == approx_dict({1: 1 / 61, 2: 1 / 62, 3: 1 / 63})


def test_rrf_equal_weights_is_classic_rrf():
    out = rrf(RUNS, {"dense": 1.0, "bm25": 1.0, "tags": 1.0})
    assert out[4] == pytest.approx(1 / (60 + 3) + 1 / (60 + 2))
    assert out[5] == pytest.approx(1 / (60 + 1))


@pytest.mark.parametrize("rrf_k", [0, -1, math.nan])
def test_rrf_k_must_be_positive(rrf_k):
    for method in FUSERS:
        with pytest.raises(ValueError, match="rrf_k"):
            fuse(method, RUNS, {"dense": 1.0}, rrf_k=rrf_k)


# Convex ==========================================================================================
def test_convex_min_max_hand_values():
    out = convex({"dense": DENSE, "bm25": BM25}, {"dense": 0.7, "bm25": 0.3})
    dense_norm = {1: (0.9 - 0.1) / 0.8, 2: (0.5 - 0.1) / 0.8, 3: 0.0}
    bm25_norm = {2: (8 - 2) / 6, 3: (4 - 2) / 6, 4: 0.0}
    assert out == approx_dict(
        {
            1: 0.7 * dense_norm[1],  # missing from bm25 -> 0
            2: 0.7 * dense_norm[2] + 0.3 * bm25_norm[2],
            3: 0.7 * dense_norm[3] + 0.3 * bm25_norm[3],
            4: 0.3 * bm25_norm[4],  # missing from dense -> 0
        }
    )


def test_convex_z_score_hand_values():
    mean_d = (0.9 + 0.5 + 0.1) / 3
    std_d = math.sqrt(((0.9 - mean_d) ** 2 + (0.5 - mean_d) ** 2 + (0.1 - mean_d) ** 2) / 3)
    mean_b = (8 + 4 + 2) / 3
    std_b = math.sqrt(((8 - mean_b) ** 2 + (4 - mean_b) ** 2 + (2 - mean_b) ** 2) / 3)
    out = convex({"dense": DENSE, "bm25": BM25}, {"dense": 0.5, "bm25": 0.5}, normalization="z-score")
    assert out == approx_dict(
        {
            1: 0.5 * (0.9 - mean_d) / std_d,
            2: 0.5 * (0.5 - mean_d) / std_d + 0.5 * (8 - mean_b) / std_b,
            3: 0.5 * (0.1 - mean_d) / std_d + 0.5 * (4 - mean_b) / std_b,
            4: 0.5 * (2 - mean_b) / std_b,
        }
    )


def test_convex_theoretical_min_max_uses_per_retriever_floor():
    out = convex(RUNS, alpha_weights(0.6, 0.5), normalization="theoretical-min-max")
    w_d, w_b, w_t = 0.6, 1 - 0.6, (1 - 0.6) * 0.5
    assert out == approx_dict(
        {
            1: w_d * (0.9 + 1) / (0.9 + 1),
            2: w_d * (0.5 + 1) / (0.9 + 1) + w_b * 8 / 8,
            3: w_d * (0.1 + 1) / (0.9 + 1) + w_b * 4 / 8,
            4: w_b * 2 / 8 + w_t * 1 / 3,
            5: w_t * 3 / 3,
        }
    )


def test_convex_theoretical_min_max_unknown_retriever():
    with pytest.raises(ValueError, match="no theoretical minimum for retriever 'splade'"):
        convex({"splade": {1: 1.0}}, {"splade": 1.0}, normalization="theoretical-min-max")


def test_convex_none_weight_zero_and_ties():
    out = convex(RUNS, {"dense": 2.0, "tags": 0.0, "bm25": 1.0}, normalization="none")
    assert out == approx_dict({1: 2 * 0.9, 2: 2 * 0.5 + 8.0, 3: 2 * 0.1 + 4.0, 4: 2.0})
    tied = convex({"dense": {4: 0.3, 2: 0.3, 8: 0.1}}, {"dense": 1.0})
    assert tied == {4: 1.0, 2: 1.0, 8: 0.0}
    assert rank(tied) == [(2, 1.0), (4, 1.0), (8, 0.0)]


# DBSF ============================================================================================
def sample_std(values):
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def test_dbsf_hand_values():
    mean_d, std_d = (0.9 + 0.5 + 0.1) / 3, math.sqrt(((0.9 - 0.5) ** 2 + 0 + (0.1 - 0.5) ** 2) / (3 - 1))
    mean_b = (8 + 4 + 2) / 3
    std_b = math.sqrt(((8 - mean_b) ** 2 + (4 - mean_b) ** 2 + (2 - mean_b) ** 2) / (3 - 1))
    low_d, low_b = mean_d - 3 * std_d, mean_b - 3 * std_b
    out = dbsf({"dense": DENSE, "bm25": BM25}, {"dense": 0.7, "bm25": 0.3})
    assert out == approx_dict(
        {
            1: 0.7 * (0.9 - low_d) / (6 * std_d),
            2: 0.7 * (0.5 - low_d) / (6 * std_d) + 0.3 * (8 - low_b) / (6 * std_b),
            3: 0.7 * (0.1 - low_d) / (6 * std_d) + 0.3 * (4 - low_b) / (6 * std_b),
            4: 0.3 * (2 - low_b) / (6 * std_b),
        }
    )
    assert out[2] == pytest.approx(0.7 * 0.5 + 0.3 * (8 - low_b) / (6 * std_b))  # the mean maps to 0.5


def test_dbsf_degenerate_runs_are_half():
    out = dbsf({"dense": {1: 0.3}, "bm25": {1: 2.0, 2: 2.0}}, {"dense": 1.0, "bm25": 0.5})
    assert out == approx_dict({1: 1.0 * 0.5 + 0.5 * 0.5, 2: 0.5 * 0.5})


def test_dbsf_beyond_three_sigma_not_clipped():
    run = {i: 0.0 for i in range(10)} | {10: 1.0}
    mean, std = 1 / 11, sample_std(list(run.values()))
    out = dbsf({"dense": run}, {"dense": 1.0})
    assert out[10] == pytest.approx((1.0 - (mean - 3 * std)) / (6 * std))
    assert out[10] > 1.0


def test_dbsf_weight_zero_ignored():
    assert set(dbsf(RUNS, {"dense": 1.0, "bm25": 0.0, "tags": 0.0})) == set(DENSE)


# Registry, rank, alpha ===========================================================================
def test_unknown_fusion():
    with pytest.raises(ValueError, match=r"unknown fusion 'wsum'; choose from \['convex', 'dbsf', 'rrf'\]"):
        fuse("wsum", RUNS, {"dense": 1.0})


def test_fuse_dispatches():
    weights = alpha_weights(0.3, 1.0)
    for method, fuser in FUSERS.items():
        for norm in NORMS:
            assert fuse(method, RUNS, weights, rrf_k=20, normalization=norm) == fuser(
                RUNS, weights, rrf_k=20, normalization=norm
            )


@pytest.mark.parametrize("weight", [-0.1, math.nan, math.inf])
def test_bad_weights_rejected(weight):
    with pytest.raises(ValueError, match="weight of 'bm25'"):
        fuse("convex", RUNS, {"dense": 1.0, "bm25": weight})


def test_empty_runs():
    for method in FUSERS:
        assert fuse(method, {}, {}) == {}
        assert fuse(method, {"dense": {}}, {"dense": 1.0}) == {}


def test_rank_orders_and_limits():
    scores = {3: 0.5, 1: 0.9, 7: 0.5, 2: 0.1}
    assert rank(scores) == [(1, 0.9), (3, 0.5), (7, 0.5), (2, 0.1)]
    assert rank(scores, 2) == [(1, 0.9), (3, 0.5)]
    assert rank(scores, 0) == []
    assert rank(scores, 10) == rank(scores)
    with pytest.raises(ValueError, match="limit"):
        rank(scores, -1)


def test_alpha_weights():
    assert alpha_weights(1.0) == {"dense": 1.0, "bm25": 0.0, "tags": 0.0}
    assert alpha_weights(0.0, 0.5) == {"dense": 0.0, "bm25": 1.0, "tags": 0.5}
    assert alpha_weights(0.25, 2.0) == {"dense": 0.25, "bm25": 1 - 0.25, "tags": (1 - 0.25) * 2.0}
    for alpha in (-0.01, 1.01, math.nan):
        with pytest.raises(ValueError, match="alpha"):
            alpha_weights(alpha)
    for tag_weight in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="tag_weight"):
            alpha_weights(0.5, tag_weight)


@pytest.mark.parametrize("method", sorted(FUSERS))
@pytest.mark.parametrize("norm", NORMS)
def test_alpha_extremes_give_single_retriever_order(method, norm):
    dense_only = fuse(method, RUNS, alpha_weights(1.0), normalization=norm)
    assert ids(dense_only) == ids(DENSE) == [1, 2, 3]
    bm25_only = fuse(method, RUNS, alpha_weights(0.0), normalization=norm)
    assert ids(bm25_only) == ids(BM25) == [2, 3, 4]


@pytest.mark.parametrize("method", sorted(FUSERS))
@pytest.mark.parametrize("norm", NORMS)
def test_inputs_not_mutated(method, norm):
    runs = {"dense": dict(DENSE), "bm25": dict(BM25), "tags": dict(TAGS)}
    weights = alpha_weights(0.4, 0.5)
    runs_before, weights_before = copy.deepcopy(runs), copy.deepcopy(weights)
    out = fuse(method, runs, weights, normalization=norm)
    rank(out, 2)
    normalize(runs["dense"], norm, theoretical_min=-1.0)
    assert runs == runs_before and weights == weights_before
    assert list(runs["dense"]) == list(runs_before["dense"])  # insertion order too
    assert all(out is not run for run in runs.values())


# Agreement with ranx =============================================================================
N_QUERIES, N_DOCS, TOP = 5, 20, 10
WEIGHTS = alpha_weights(0.7, 0.5)  # all > 0, so ranx's wsum sees the same candidates


def _random_runs() -> dict[str, dict[str, dict[str, float]]]:
    """{retriever: {qid: {doc_id: score}}} with 14-20 of 20 docs per query (so some are missing)."""
    rng = random.Random(20231)
    ranges = {"dense": (-1.0, 1.0), "bm25": (0.0, 25.0), "tags": (0.0, 3.0)}
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for name, (low, high) in ranges.items():
        runs[name] = {}
        for q in range(N_QUERIES):
            docs = rng.sample([f"d{i:02d}" for i in range(N_DOCS)], rng.randint(14, N_DOCS))
            runs[name][f"q{q}"] = {doc: rng.uniform(low, high) for doc in docs}
    return runs


@pytest.fixture(scope="module")
def ranx_cases():
    """Ours vs ranx fused runs, as ``{case: (ours, theirs)}`` of ``{qid: {doc_id: score}}``."""
    ranx = pytest.importorskip("ranx")
    from ranx.fusion import rrf as ranx_rrf
    from ranx.fusion import wsum as ranx_wsum

    runs = _random_runs()
    names = list(runs)
    ranx_runs = [ranx.Run(copy.deepcopy(runs[name]), name=name) for name in names]
    weight_list = [WEIGHTS[name] for name in names]

    def ours(method, weights, normalization="min-max"):
        return {
            qid: fuse(method, {name: runs[name][qid] for name in names}, weights, normalization=normalization)
            for qid in runs["dense"]
        }

    params = {"weights": weight_list}
    return {
        "rrf": (
            ours("rrf", dict.fromkeys(names, 1.0)),
            ranx.fuse(ranx_runs, norm=None, method="rrf", params={"k": 60}).to_dict(),
        ),
        # ranx has no weighted RRF: weighted sum of its single-run RRF scores is the exact equivalent
        "weighted-rrf": (
            ours("rrf", WEIGHTS),
            ranx_wsum([ranx_rrf([run], k=60) for run in ranx_runs], weight_list).to_dict(),
        ),
        "convex-min-max": (
            ours("convex", WEIGHTS),
            ranx.fuse(ranx_runs, norm="min-max", method="wsum", params=params).to_dict(),
        ),
        "convex-z-score": (
            ours("convex", WEIGHTS, "z-score"),
            ranx.fuse(ranx_runs, norm="zmuv", method="wsum", params=params).to_dict(),
        ),
        "convex-none": (
            ours("convex", WEIGHTS, "none"),
            ranx.fuse(ranx_runs, norm=None, method="wsum", params=params).to_dict(),
        ),
    }


def _assert_same_ranking(ours: dict[str, float], theirs: dict[str, float]) -> None:
    """Same top-TOP doc ids, a swap allowed only between exactly tied (within 1e-12) ranx scores."""
    ours_top, theirs_top = ids(ours)[:TOP], ids(theirs)[:TOP]
    for mine, reference in zip(ours_top, theirs_top, strict=True):
        assert mine == reference or abs(theirs[mine] - theirs[reference]) <= 1e-12


@pytest.mark.filterwarnings("ignore:unsafe cast")  # numba warning inside ranx's rrf
@pytest.mark.parametrize("case", ["rrf", "weighted-rrf", "convex-min-max", "convex-z-score", "convex-none"])
def test_matches_ranx(ranx_cases, case):
    ours, theirs = ranx_cases[case]
    assert set(ours) == set(theirs) == {f"q{q}" for q in range(N_QUERIES)}
    for qid in ours:
        assert set(ours[qid]) == set(theirs[qid])
        assert ours[qid] == {
            doc: pytest.approx(score, rel=1e-9, abs=1e-12) for doc, score in theirs[qid].items()
        }
        _assert_same_ranking(ours[qid], theirs[qid])


def test_dbsf_matches_independent_reference():
    """ranx has no DBSF: compare with a direct transcription of Qdrant's formula on the same runs."""
    runs = _random_runs()
    for qid in runs["dense"]:
        expected: dict[str, float] = {}
        for name, run in runs.items():
            values = list(run[qid].values())
            mean, std = sum(values) / len(values), sample_std(values)
            for doc, score in run[qid].items():
                expected[doc] = expected.get(doc, 0.0) + WEIGHTS[name] * (score - (mean - 3 * std)) / (
                    6 * std
                )
        out = dbsf({name: run[qid] for name, run in runs.items()}, WEIGHTS)
        assert out == approx_dict(expected)


# Properties ======================================================================================
finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)
runs_strategy = st.fixed_dictionaries(
    {name: st.dictionaries(st.integers(0, 40), finite, max_size=25) for name in ("dense", "bm25", "tags")}
)
weights_strategy = st.fixed_dictionaries(
    {name: st.sampled_from([0.0, 0.25, 1.0]) | st.floats(0.0, 10.0) for name in ("dense", "bm25", "tags")}
)
# well-separated scores (multiples of 1e-3) so normalisation cannot merge distinct values by rounding
grid = st.integers(-(10**6), 10**6).map(lambda i: i / 1000)


@settings(max_examples=60, deadline=None)
@given(
    runs=runs_strategy,
    weights=weights_strategy,
    method=st.sampled_from(sorted(FUSERS)),
    norm=st.sampled_from(NORMS),
    rrf_k=st.integers(1, 100),
)
def test_property_finite_and_union_of_keys(runs, weights, method, norm, rrf_k):
    if norm == "theoretical-min-max":  # keep scores at or above each retriever's floor
        runs = {
            name: {k: max(v, THEORETICAL_MIN[name]) for k, v in run.items()} for name, run in runs.items()
        }
    before = copy.deepcopy(runs)
    out = fuse(method, runs, weights, rrf_k=rrf_k, normalization=norm)
    assert all(math.isfinite(score) for score in out.values())
    assert set(out) == set().union(*(run for name, run in runs.items() if weights[name] > 0))
    assert runs == before


@settings(max_examples=60, deadline=None)
@given(
    scores=st.dictionaries(st.integers(-20, 20), st.sampled_from([0.0, 0.5, 1.0, -2.0]), max_size=30),
    limit=st.integers(0, 35),
)
def test_property_rank_is_tie_stable(scores, limit):
    expected = sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))
    reordered = dict(reversed(list(scores.items())))
    assert rank(scores) == rank(reordered) == expected
    assert rank(scores, limit) == expected[:limit]


@settings(max_examples=60, deadline=None)
@given(
    dense=st.dictionaries(st.integers(0, 40), grid, min_size=1, max_size=25),
    others=st.dictionaries(st.integers(0, 60), grid, max_size=25),
    method=st.sampled_from(sorted(FUSERS)),
    norm=st.sampled_from(NORMS),
    tag_weight=st.floats(0.0, 5.0),
)
def test_property_alpha_one_is_dense_order(dense, others, method, norm, tag_weight):
    dense = {k: max(v, -1.0) if norm == "theoretical-min-max" else v for k, v in dense.items()}
    runs = {"dense": dense, "bm25": others, "tags": others}
    out = fuse(method, runs, alpha_weights(1.0, tag_weight), normalization=norm)
    assert ids(out) == ids(dense)


@pytest.mark.parametrize(("method", "norm"), [("dbsf", "min-max"), ("convex", "z-score")])
def test_a_spread_too_small_to_square_still_normalises(method, norm):
    # found by the property test above: (1e-293)^2 underflows to 0, so the std was 0 for distinct scores
    runs = {"dense": {}, "bm25": {0: 0.0, 1: 6.902455958675812e-293}, "tags": {}}
    out = fuse(method, runs, {"dense": 0.0, "bm25": 0.25, "tags": 0.0}, rrf_k=1, normalization=norm)
    assert set(out) == {0, 1} and all(math.isfinite(v) for v in out.values()) and out[1] > out[0]
