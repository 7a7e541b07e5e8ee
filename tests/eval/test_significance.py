"""Paired tests, Holm's correction and confidence intervals, with hand-derived expected values."""

from __future__ import annotations

import math

import pytest

from hybridlab.eval.significance import holm, mean_ci, paired_test, randomization_test, t_test


def scores(values):
    return {f"q{i:02d}": float(v) for i, v in enumerate(values)}


def test_holm_multiplies_by_the_rank_and_keeps_the_order_monotone():
    # sorted 0.01, 0.03, 0.04 -> 3*0.01, 2*0.03, max(0.06, 1*0.04)
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.02]) == [0.02] and holm([]) == []
    with pytest.raises(ValueError, match="within"):
        holm([1.5])


def test_randomization_on_identical_runs_gives_p_one():
    a = scores([0.1 * i for i in range(40)])  # 2^40 patterns: Monte Carlo
    assert randomization_test(a, dict(a)) == 1.0
    small = scores([0.3, 0.7])  # exact
    assert randomization_test(small, dict(small)) == 1.0


def test_exact_randomization_counts_sign_patterns():
    # differences (1, 2): |means| of the 4 patterns 1.5, 0.5, 0.5, 1.5 -> 2 of 4 reach 1.5
    assert randomization_test(scores([1, 2]), scores([0, 0])) == 0.5
    # (1, 1, 1): only all-plus and all-minus reach 1 -> 2 of 8
    assert randomization_test(scores([1, 1, 1]), scores([0, 0, 0])) == 0.25


def test_monte_carlo_randomization_is_seeded_and_bounded_below():
    a, b = scores([1] * 50), scores([0] * 50)  # no sign pattern but the two extremes reaches 1
    assert randomization_test(a, b, permutations=1000) == pytest.approx(1 / 1001)
    mixed_a, mixed_b = scores([i % 3 for i in range(30)]), scores([(i + 1) % 3 for i in range(30)])
    assert randomization_test(mixed_a, mixed_b, seed=1) == randomization_test(mixed_a, mixed_b, seed=1)


def test_t_test_against_the_closed_form_for_two_degrees_of_freedom():
    # differences 1, 2, 3: mean 2, s 1, t = 2*sqrt(3); with 2 df, P(|T| > t) = 1 - t / sqrt(t^2 + 2)
    assert t_test(scores([1, 2, 3]), scores([0, 0, 0])) == pytest.approx(1 - math.sqrt(12 / 14))
    assert t_test(scores([1, 2]), scores([1, 2])) == 1.0  # no difference, no variance


def test_paired_test_needs_the_same_queries_and_a_known_test():
    outcome = paired_test(scores([1, 2]), scores([0, 0]), "randomization")
    assert (outcome.n, outcome.mean_a, outcome.mean_b, outcome.difference, outcome.p_value) == (
        2,
        1.5,
        0.0,
        1.5,
        0.5,
    )
    with pytest.raises(ValueError, match="same queries"):
        paired_test({"a": 1.0}, {"b": 1.0})
    with pytest.raises(ValueError, match=r"unknown test 'z'; choose from \['randomization', 't-test'\]"):
        paired_test(scores([1]), scores([1]), "z")


def test_t_interval_by_hand():
    # mean 2, s 1, n 3; t(0.975, 2 df) = sqrt(2 * 0.95^2 / (1 - 0.95^2))
    interval = mean_ci([1, 2, 3], 0.95, "t")
    half = math.sqrt(2 * 0.95**2 / (1 - 0.95**2)) / math.sqrt(3)
    assert (interval.mean, interval.low, interval.high) == pytest.approx((2, 2 - half, 2 + half))


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    values = [0.0, 1.0] * 20
    first, second = mean_ci(values, method="bootstrap"), mean_ci(values, method="bootstrap")
    assert first == second and first.low < 0.5 < first.high
    with pytest.raises(ValueError, match="unknown interval method"):
        mean_ci(values, method="normal")
