"""Search settings: one precedence (argument > env > config file > adaptive default), validation."""

from __future__ import annotations

import json

import pytest

from hybridlab.config import (
    SearchConfig,
    adaptive_alpha,
    load_config_file,
    resolve_auto,
    resolve_search_config,
)


@pytest.mark.parametrize(
    ("n_chunks", "alpha"), [(0, 0.5), (499, 0.5), (500, 0.6), (4999, 0.6), (5000, 0.6), (10**7, 0.6)]
)
def test_adaptive_alpha_thresholds(n_chunks, alpha):
    assert adaptive_alpha(n_chunks) == alpha
    config, sources = resolve_search_config({}, env={}, n_chunks=n_chunks)
    assert config.alpha == alpha and sources["alpha"] == "adaptive"


def test_precedence_argument_env_config_default():
    file = {"search": {"alpha": 0.2, "rrf_k": 10, "depth": 30}}
    env = {"HYBRIDLAB_ALPHA": "0.4", "HYBRIDLAB_RRF_K": "20"}
    config, sources = resolve_search_config({"alpha": 0.9}, config_file=file, env=env, n_chunks=100)
    assert (config.alpha, sources["alpha"]) == (0.9, "argument")
    assert (config.rrf_k, sources["rrf_k"]) == (20, "env")
    assert (config.depth, sources["depth"]) == (30, "config")
    assert (config.limit, sources["limit"]) == (10, "default")
    config, sources = resolve_search_config({}, config_file=file, env=env)
    assert (config.alpha, sources["alpha"]) == (0.4, "env")
    config, sources = resolve_search_config({}, config_file=file, env={})
    assert (config.alpha, sources["alpha"]) == (0.2, "config")


def test_none_arguments_and_empty_env_values_do_not_count():
    config, sources = resolve_search_config({"alpha": None}, env={"HYBRIDLAB_ALPHA": ""}, n_chunks=6000)
    assert (config.alpha, sources["alpha"]) == (0.6, "adaptive")


def test_recency_decay_alias_and_its_precedence():
    config, sources = resolve_search_config({}, env={"HYBRIDLAB_RECENCY_DECAY": "0.05"})
    assert (config.decay, sources["decay"]) == (0.05, "env")
    config, _ = resolve_search_config({}, env={"HYBRIDLAB_RECENCY_DECAY": "0.05", "HYBRIDLAB_DECAY": "0.02"})
    assert config.decay == 0.02
    config, _ = resolve_search_config({"decay": 0.0}, env={"HYBRIDLAB_RECENCY_DECAY": "0.05"})
    assert config.decay == 0.0


@pytest.mark.parametrize(("text", "value"), [("true", True), ("0", False), ("auto", None), ("", None)])
def test_staged_from_env(text, value):
    config, _ = resolve_search_config({}, env={"HYBRIDLAB_STAGED": text})
    assert config.staged is value


@pytest.mark.parametrize(("n_chunks", "auto"), [(0, False), (5000, False), (5001, True)])
def test_auto_settings_turn_on_above_the_staged_threshold(n_chunks, auto):
    resolved = resolve_auto(SearchConfig(), n_chunks)
    assert (resolved.staged, resolved.fill_dense) == (auto, auto)
    explicit = resolve_auto(SearchConfig(staged=not auto, fill_dense=not auto), n_chunks)
    assert (explicit.staged, explicit.fill_dense) == (not auto, not auto)
    assert resolve_auto(SearchConfig(staged_threshold=10), 11).fill_dense is True


@pytest.mark.parametrize(("text", "value"), [("on", True), ("false", False), ("auto", None)])
def test_fill_dense_from_env(text, value):
    config, sources = resolve_search_config({}, env={"HYBRIDLAB_FILL_DENSE": text})
    assert config.fill_dense is value and sources["fill_dense"] == "env"


def test_bad_env_value_names_the_setting():
    with pytest.raises(ValueError, match=r"setting 'alpha': cannot parse 'lots'"):
        resolve_search_config({}, env={"HYBRIDLAB_ALPHA": "lots"})


def test_unknown_argument_lists_the_choices():
    with pytest.raises(ValueError, match=r"unknown search settings \['alpah'\]; choose from \[.*'alpha'"):
        resolve_search_config({"alpah": 0.5}, env={})


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("fusion", "borda", r"unknown fusion 'borda'; choose from \['convex', 'dbsf', 'learned', 'rrf'\]"),
        ("mode", "magic", r"unknown mode 'magic'; choose from \['bm25', 'hybrid', 'tags', 'vector'\]"),
        ("normalization", "l2", r"unknown normalization 'l2'"),
        ("alpha", 1.5, r"alpha must be in \[0, 1\], got 1.5"),
        ("limit", 0, r"limit must be >= 1, got 0"),
        ("decay", -0.1, r"decay must be >= 0"),
        ("rrf_k", 0, r"rrf_k must be > 0"),
    ],
)
def test_search_config_validation(field, value, message):
    with pytest.raises(ValueError, match=message):
        SearchConfig(**{field: value})


def test_defaults_documented_in_the_issue():
    config = SearchConfig()
    assert (config.rrf_k, config.depth, config.limit, config.candidates, config.fallback_threshold) == (
        60,
        100,
        10,
        100,
        20,
    )
    assert (config.staged, config.staged_threshold, config.tag_boost, config.tag_boost_min_terms) == (
        None,
        5000,
        1.5,
        3,
    )


def test_config_file_loading(tmp_path):
    path = tmp_path / "best.json"
    path.write_text(json.dumps({"search": {"alpha": 0.6, "fusion": "rrf"}}))
    assert load_config_file(path)["search"] == {"alpha": 0.6, "fusion": "rrf"}
    config, sources = resolve_search_config({}, config_file=load_config_file(path), env={})
    assert (config.fusion, sources["fusion"]) == ("rrf", "config")
    path.write_text(json.dumps({"search": {"alpah": 0.6}}))
    with pytest.raises(ValueError, match=r"unknown search settings \['alpah'\]"):
        load_config_file(path)
    path.write_text("{nope")
    with pytest.raises(ValueError, match="invalid JSON"):
        load_config_file(path)
    with pytest.raises(FileNotFoundError, match="config file not found"):
        load_config_file(tmp_path / "missing.json")


def test_an_exported_config_keeps_the_behaviour_of_settings_added_after_it(tmp_path):
    path = tmp_path / "old.json"
    path.write_text('{"search": {"alpha": 0.5}, "index": {}, "provenance": {"dataset": "memories"}}')
    assert load_config_file(path)["search"] == {
        "adaptive_fusion": False,
        "chunk_decay": 0.0,
        "rare_term_max_df": 0,
        "date_weight": 0.0,
        "alpha": 0.5,
    }
    path.write_text('{"search": {"alpha": 0.5, "adaptive_fusion": true}, "provenance": {}}')
    assert load_config_file(path)["search"]["adaptive_fusion"] is True
    path.write_text('{"search": {"alpha": 0.5}}')  # a hand-written config: new settings take their defaults
    assert load_config_file(path)["search"] == {"alpha": 0.5}
