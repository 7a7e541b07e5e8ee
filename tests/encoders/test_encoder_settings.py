"""Encoder settings on the command line (issue 30): argument > env > config > unset; prompts and max
length recorded in the spec and used for queries; fp16/bf16 refused on the CPU; the dtype rule
(fp16 vectors meet fp32 queries, bf16 ones do not); the embeddings cache keeps other settings'
vectors apart. The tiny random BERT of test_custom_models; nothing downloads."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from hybridlab import cli
from hybridlab.config import EncoderSettings, resolve_encoder_settings
from hybridlab.encoders import registry
from hybridlab.encoders.registry import encoder_mismatch, load_encoder
from hybridlab.index.format.embedding_cache import cache_model
from tests.encoders.test_custom_models import DOCS, pytestmark, save_tiny_model  # noqa: F401

SETTINGS = ["--query-prompt", "search: ", "--document-prompt", "doc: ", "--max-seq-length", "16"]


def test_precedence_argument_env_config():
    env = {"HYBRIDLAB_DEVICE": "cuda:1", "HYBRIDLAB_BATCH_SIZE": "8", "HYBRIDLAB_DTYPE": "bf16"}
    config = {"device": "mps", "max_seq_length": 128, "query_prompt": "q: "}
    settings = resolve_encoder_settings({"device": "cpu", "dtype": None}, config, env)
    assert settings == EncoderSettings(
        device="cpu", batch_size=8, dtype="bfloat16", max_seq_length=128, query_prompt="q: "
    )
    assert resolve_encoder_settings({}, None, {}) == EncoderSettings()
    with pytest.raises(ValueError, match="unknown dtype 'fp8'"):
        resolve_encoder_settings({"dtype": "fp8"}, None, {})
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        resolve_encoder_settings({}, None, {"HYBRIDLAB_BATCH_SIZE": "0"})


def test_bf16_vectors_do_not_meet_fp32_queries():
    record = {"source": "s", "revision": "r", "dim": 4, "dtype": "float32"}
    assert encoder_mismatch({**record, "dtype": "float16"}, record) == []
    assert encoder_mismatch({**record, "dtype": "bfloat16"}, record) == ["dtype"]
    assert encoder_mismatch({**record, "dtype": "bfloat16"}, {**record, "dtype": "bfloat16"}) == []


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    """The tiny model's name (its folder found by HYBRIDLAB_MODEL_PATHS) and a 3-document corpus."""
    model = save_tiny_model(tmp_path / "tiny-bert")
    monkeypatch.setenv("HYBRIDLAB_MODEL_PATHS", f"tiny-bert={model}")
    registry.register_recorded({})  # no settings recorded by another test's index of a "tiny-bert"
    assert (
        registry.canonical_name(model) == "tiny-bert"
    )  # also this folder under settings without model_paths
    data = tmp_path / "data"
    data.mkdir()
    (data / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": d, "title": title, "text": text}) + "\n" for d, (title, text) in DOCS.items()
        )
    )
    yield "tiny-bert", data
    registry.configure(None)


def test_prompts_and_max_length_are_recorded_and_used_for_queries(corpus, tmp_path, capsys, monkeypatch):
    from hybridlab.search.engine import open_index

    model, data = corpus
    index = tmp_path / "index"
    assert cli.main(["index", str(data), "--index", str(index), "--model", model, "-q", *SETTINGS]) == 0
    record = json.loads((index / "manifest.json").read_text())["models"][model]["encoder"]
    assert (record["query_prefix"], record["document_prefix"], record["max_seq_length"]) == (
        "search: ",
        "doc: ",
        16,
    )
    assert record["settings"] == {
        "query_prefix": "search: ",
        "document_prefix": "doc: ",
        "max_seq_length": 16,
    }
    plain = load_encoder(model).model  # the model as its folder configures it (query:/passage:, 64 tokens)
    plain_max = plain.max_seq_length
    with open_index(index) as opened:  # a process without settings: the recorded ones encode queries
        rows = opened._con.execute("SELECT chunk_id, embed_text FROM chunks ORDER BY chunk_id").fetchall()
        plain.max_seq_length = 16
        try:
            expected = plain.encode(["doc: " + text for _, text in rows], normalize_embeddings=True)
            query = plain.encode(["search: vitamin D"], normalize_embeddings=True)[0]
        finally:
            plain.max_seq_length = plain_max
        assert np.allclose(opened.dense[model].vectors, expected, atol=1e-5)
        assert np.allclose(
            opened.query_models.query_vector(opened.snapshot(), model, "vitamin D"), query, atol=1e-5
        )
    capsys.readouterr()
    assert cli.main(["stats", "--index", str(index)]) == 0
    assert "'query_prefix': 'search: '" in capsys.readouterr().out
    # a later write without settings uses the recorded ones; another prompt is another encoder, refused
    (data / "corpus.jsonl").write_text(
        (data / "corpus.jsonl").read_text()
        + json.dumps({"_id": "d4", "title": "", "text": "Statins lower cholesterol."})
        + "\n"
    )
    before = (index / "manifest.json").read_text()
    assert (
        cli.main(["index", str(data), "--index", str(index), "--model", model, "-q", "--query-prompt", "q: "])
        == 2
    )
    assert "give the encoder settings it was built with again" in capsys.readouterr().err
    assert (index / "manifest.json").read_text() == before
    assert cli.main(["index", str(data), "--index", str(index), "--model", model, "-q"]) == 0
    assert json.loads((index / "manifest.json").read_text())["models"][model]["encoder"] == record
    with open_index(index) as opened:
        (chunk,) = opened._con.execute("SELECT chunk_id FROM chunks WHERE doc_id = 'd4'").fetchone()
        dense = opened.dense[model]
        plain.max_seq_length = 16
        try:
            expected = plain.encode(["doc: Statins lower cholesterol."], normalize_embeddings=True)[0]
        finally:
            plain.max_seq_length = plain_max
        assert np.allclose(dense.take(dense.rows_of(np.array([chunk])))[0], expected, atol=1e-5)
    monkeypatch.setenv("HYBRIDLAB_QUERY_PROMPT", "search: ")  # env counts like the argument
    assert cli.main(["index", str(data), "--index", str(index), "--model", model, "-q", *SETTINGS[2:]]) == 0


def test_other_settings_are_cached_apart(corpus):
    model, _ = corpus
    plain = cache_model(model)
    registry.configure(EncoderSettings(query_prompt="search: "))
    assert cache_model(model) == plain  # the query prompt does not change document vectors
    registry.configure(EncoderSettings(document_prompt="doc: "))
    assert cache_model(model).startswith(plain + "#") and cache_model(model) != plain
    registry.configure(EncoderSettings(max_seq_length=64))  # the folder's own value: no change
    assert cache_model(model) == plain


def test_half_precision_needs_a_gpu_and_bf16_indexes_need_bf16_queries(corpus, tmp_path, capsys, monkeypatch):
    from hybridlab.search.engine import open_index

    model, data = corpus
    index = tmp_path / "index"
    capsys.readouterr()
    assert (
        cli.main(
            [
                "index",
                str(data),
                "--index",
                str(index),
                "--model",
                model,
                "-q",
                "--device",
                "cpu",
                "--dtype",
                "fp16",
            ]
        )
        == 2
    )
    assert "dtype float16 of" in capsys.readouterr().err and not (index / "manifest.json").exists()
    assert (
        cli.main(["index", str(data), "--index", str(index), "--model", model, "-q", "--device", "cpu"]) == 0
    )
    copy = tmp_path / "as-if-bf16"
    shutil.copytree(index, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    for info in manifest["models"].values():
        info["encoder"]["dtype"] = "bfloat16"  # as a bf16 build on a GPU records it
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with open_index(copy) as opened, pytest.raises(ValueError, match=r"differs in \['dtype'\]"):
        opened.search("vitamin", mode="vector")
    manifest = json.loads((copy / "manifest.json").read_text())
    for info in manifest["models"].values():
        info["encoder"]["dtype"] = "float16"  # fp16 vectors: fp32 queries on the CPU are fine
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with open_index(copy) as opened:
        assert len(opened.search("vitamin", mode="vector", limit=3)) == 3


def test_memory_stores_use_the_recorded_settings(corpus, data_dir, tmp_path):
    from hybridlab.index.write.build import fold_log
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    model, _ = corpus
    index = tmp_path / "index"
    assert (
        cli.main(
            [
                "index",
                str(data_dir / "corpus" / "memories.jsonl"),
                "--index",
                str(index),
                "--model",
                model,
                "-q",
                *SETTINGS,
            ]
        )
        == 0
    )
    writer = MemoryWriter(index)  # this process has no encoder settings: the index's are used
    stored = writer.store("Statins lower cholesterol in older adults.")
    writer.close()
    fold_log(index)
    plain = load_encoder(model).model
    with open_index(index) as opened:
        (chunk, text) = opened._con.execute(
            "SELECT chunk_id, embed_text FROM chunks WHERE doc_id = ?", [stored.id]
        ).fetchone()
        dense = opened.dense[model]
        vector = dense.take(dense.rows_of(np.array([chunk])))[0]
    plain_max, plain.max_seq_length = plain.max_seq_length, 16
    try:
        expected = plain.encode(["doc: " + text], normalize_embeddings=True)[0]
    finally:
        plain.max_seq_length = plain_max
    assert np.allclose(vector, expected, atol=1e-5)


@pytest.mark.slow  # starts two worker processes (~10-20 s)
def test_several_devices_share_the_documents_through_a_pool(corpus):
    from hybridlab.encoders.sentence_transformers import SentenceTransformerEncoder

    model, _ = corpus
    one = load_encoder(model)
    texts = [f"{title} {text}" for title, text in DOCS.values()] * 4
    pooled = SentenceTransformerEncoder(one.spec, device="cpu,cpu")
    assert pooled.devices == ["cpu", "cpu"]
    try:
        assert np.allclose(pooled.encode_documents(texts), one.encode_documents(texts), atol=1e-5)
    finally:
        pooled.close()
    assert pooled.pool is None
