"""The second stage: late interaction over token vectors stored at index time.

Pure parts (MaxSim, the combinations, the reorder) with expected values by hand; the token store's
contract (content-addressed, incremental, interrupted writes invisible, compaction); then a real
index of the hand-written memories of `test_search.py` with the bundled ColBERT model: vectors stored
by a build and by `store_memory` alone, the stage's place in `explain`, verify/repair."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from test_search import write_memories

from hybridlab.config import IndexConfig, SearchConfig
from hybridlab.encoders.late import LateSpec, get_late_spec, load_late_encoder, maxsim
from hybridlab.errors import InvalidValueError
from hybridlab.index.admin.verify import repair, verify
from hybridlab.index.format.embedding_cache import text_sha256
from hybridlab.index.format.tokens import TokenStore, store_folder
from hybridlab.index.write.build import index_paths
from hybridlab.index.write.memory import MemoryWriter, make_memory
from hybridlab.search import late
from hybridlab.search.engine import open_index


# ------------------------------------------------------------------ pure functions
def unit(*rows: list[float]) -> np.ndarray:
    matrix = np.array(rows, dtype=np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def test_maxsim_is_the_mean_over_query_tokens_of_the_best_document_token():
    query = unit([1, 0], [0, 1])
    doc_a = unit([1, 0], [1, 1])  # q1 best 1.0, q2 best 1/sqrt(2)
    doc_b = unit([0, 1])  # q1 0.0, q2 1.0
    scores = maxsim(query, [doc_a, doc_b, np.zeros((0, 2), dtype=np.float32)])
    assert scores == pytest.approx([(1.0 + 1 / math.sqrt(2)) / 2, 0.5, 0.0])


def test_convex_and_rrf_combinations_by_hand():
    first, mine = [3.0, 2.0, 1.0], [0.0, 0.5, 1.0]
    # min-max: first -> 1, .5, 0; late -> 0, .5, 1
    assert late.combine(first, mine, 0.25, "convex") == pytest.approx([0.75, 0.5, 0.25])
    assert late.combine(first, mine, 1.0, "convex") == pytest.approx([0.0, 0.5, 1.0])
    k = late.LATE_RRF_K
    assert late.combine(first, mine, 0.5, "rrf") == pytest.approx(
        [0.5 / (k + 3) + 0.5 / (k + 1), 0.5 / (k + 2) + 0.5 / (k + 2), 0.5 / (k + 1) + 0.5 / (k + 3)]
    )
    with pytest.raises(InvalidValueError, match="late_combination"):
        late.combine(first, mine, 0.5, "sum")


def test_reorder_breaks_ties_by_row_and_never_mutates_its_inputs():
    rows, first, scores = [7, 3, 5], [1.0, 1.0, 1.0], [0.2, 0.2, 0.9]
    order, mixed = late.reorder(rows, first, scores, 1.0, "convex")
    assert [rows[i] for i in order] == [5, 3, 7]
    assert mixed[0] == pytest.approx(1.0)
    assert first == [1.0, 1.0, 1.0] and scores == [0.2, 0.2, 0.9]


@pytest.mark.parametrize(
    "field, value", [("late_depth", -1), ("late_depth", 1.5), ("late_weight", 1.5), ("late_combination", "x")]
)
def test_bad_late_settings_are_refused_naming_the_field(field, value):
    with pytest.raises(InvalidValueError) as error:
        SearchConfig(**{field: value})
    assert error.value.field == field


# ------------------------------------------------------------------ the token store
def test_token_store_is_content_addressed_incremental_and_compacts(tmp_path):
    store = TokenStore(tmp_path / "t", {"name": "x"})
    a, b = text_sha256("a"), text_sha256("b")
    assert store.add([a, b], [np.ones((3, 4)), np.full((2, 4), 0.5)]) == 2
    assert store.add([a], [np.zeros((1, 4))]) == 0  # stored already: nothing written
    assert store.missing([a, b, text_sha256("c")]) == [text_sha256("c")]
    got = store.get([b, a, text_sha256("c")])
    assert got[0].shape == (2, 4) and got[1].dtype == np.float32 and got[2] is None
    # another process sees a third shard as soon as its keys file is there
    other = TokenStore(tmp_path / "t")
    store.add([text_sha256("c")], [np.ones((1, 4))])
    assert other.missing([text_sha256("c")]) == []
    assert store.compact({a}) == 1
    assert store.shard_count == 1 and store.stored() == {a}


def test_a_shard_without_its_keys_file_is_an_interrupted_write_and_invisible(tmp_path):
    store = TokenStore(tmp_path / "t")
    store.add([text_sha256("a")], [np.ones((2, 4))])
    # a write interrupted after its vectors and offsets, before its keys
    np.save(tmp_path / "t" / "shard-partial.vectors.npy", np.ones((5, 4), np.float16))
    np.save(tmp_path / "t" / "shard-partial.offsets.npy", np.array([0, 5]))
    assert TokenStore(tmp_path / "t").stored() == {text_sha256("a")}
    store.compact(None)
    assert sorted(p.name for p in (tmp_path / "t").iterdir() if "partial" in p.name) == []


def test_digests_ending_in_zero_bytes_are_found():
    """numpy's fixed-width bytes drop trailing zero bytes; keys are uint8 rows for that reason."""
    sha = "ab" * 31 + "00"
    store = TokenStore(Path(os.environ.get("TMPDIR", "/tmp")) / f"hl-zero-{os.getpid()}")
    try:
        store.add([sha], [np.ones((1, 2))])
        assert store.get([sha])[0] is not None
    finally:
        import shutil

        shutil.rmtree(store.folder, ignore_errors=True)


# ------------------------------------------------------------------ the bundled encoder
def test_the_bundled_model_spec_records_everything_that_decides_its_vectors():
    spec = get_late_spec("colbert")
    assert spec.name == "answerai-colbert-small" and spec.dims == 128 and spec.dtype == "float16"
    assert len(spec.revision) == 64 and spec.query_marker == 1 and spec.document_marker == 2
    assert LateSpec.from_json(spec.to_json()) == spec
    changed = LateSpec.from_json({**spec.to_json(), "dims": 96})
    assert changed.key != spec.key  # never compared across specs: another folder


def test_bundled_encoder_is_normalised_and_reproducible_alone():
    encoder = load_late_encoder(get_late_spec("colbert"))
    text = "Caroline went to an LGBTQ support group, and it was powerful!"
    alone = encoder.encode_documents([text])[0]
    in_company = encoder.encode_documents(["a much longer text " * 20, text])[1]
    assert np.allclose(np.linalg.norm(alone, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(alone, in_company)  # a text is encoded alone: no batch-mates
    query = encoder.encode_query("who went to a support group?")
    assert query.shape[1] == 128
    # punctuation is masked in documents (ColBERT's skiplist), not in queries
    assert len(alone) < len(encoder.encode_query(text))


# ------------------------------------------------------------------ an index that stores token vectors
@pytest.fixture(scope="module")
def late_index(tmp_path_factory):
    root = tmp_path_factory.mktemp("late-index")
    index_paths(
        [write_memories(root / "memories.jsonl")],
        root / "index",
        IndexConfig(models=("wordllama",), late_models=("colbert",)),
        progress=False,
        cache_path=root / "embeddings.duckdb",
    )
    return root / "index"


def _store(index_dir: Path) -> TokenStore:
    spec = get_late_spec("colbert")
    return TokenStore(store_folder(index_dir, spec.key))


def test_a_build_stores_every_chunk_text_and_records_the_spec(late_index):
    manifest = json.loads((late_index / "manifest.json").read_text())
    spec = get_late_spec("colbert")
    assert manifest["late"]["answerai-colbert-small"] == {**spec.to_json(), "key": spec.key}
    with open_index(late_index) as index:
        rows = list(range(index.n_chunks))
        hashes = [sha for sha, _ in index.snapshot().store.embedded(rows)]
    assert _store(late_index).missing(hashes) == []
    assert verify(late_index) == []


def test_the_default_stage_runs_where_the_index_stores_token_vectors(late_index, tmp_path):
    default = SearchConfig()
    assert (default.late_depth, default.late_weight, default.late_combination) == (20, 0.6, "convex")
    with open_index(late_index) as index:
        on = index.search("tunnel endpoint", explain=True)
        off = index.search("tunnel endpoint", late_depth=0, explain=True)
    assert on[0].explain["late_depth"] == 20 and on[0].explain["late_score"] is not None
    assert off[0].explain["late_score"] is None and off[0].explain["late_model"] is None
    # an index without token vectors (built before, or with late_models=()): the default stage is off,
    # exactly the first stage; asked for explicitly, it encodes the candidates then
    index_paths(
        [write_memories(tmp_path / "memories.jsonl")],
        tmp_path / "plain",
        IndexConfig(models=("wordllama",), late_models=()),
        progress=False,
        cache_path=tmp_path / "embeddings.duckdb",
    )
    with open_index(tmp_path / "plain") as index:
        plain = index.search("tunnel endpoint", explain=True)
        first = index.search("tunnel endpoint", late_depth=0, explain=True)
        asked = index.search("tunnel endpoint", late_depth=5, explain=True)
        encoded = index.query_models.late_scorer(index.snapshot(), "colbert").encoded_now
    assert [(r.doc_id, r.score) for r in plain] == [(r.doc_id, r.score) for r in first]
    assert plain[0].explain["late_depth"] == 0
    assert asked[0].explain["late_score"] is not None and encoded > 0


def test_new_indexes_store_the_bundled_models_token_vectors_by_default():
    from hybridlab.config import default_late_models

    assert IndexConfig().late_models == default_late_models() == ("answerai-colbert-small",)
    # a stored config written before late interaction keeps none
    assert IndexConfig.from_manifest({"models": ["all-MiniLM-L6-v2"]}).late_models == ()


def test_the_stage_rescores_the_head_from_stored_vectors_and_explains_it(late_index):
    with open_index(late_index) as index:
        response = index.search_response(
            "where is the public endpoint of the tunnel server", late_depth=5, explain=True
        )
        scorer = index.query_models.late_scorer(index.snapshot(), "answerai-colbert-small")
    results = response.results
    assert scorer.encoded_now == 0  # every candidate's vectors came from the store
    assert "late_ms" in response.timings
    scored = [r for r in results if r.explain["late_score"] is not None]
    assert scored and all(r.explain["late_depth"] == 5 for r in results)
    assert sorted(r.explain["late_rank"] for r in scored) == list(range(1, len(scored) + 1))
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)
    # weight 1.0: the re-scored hits in MaxSim order
    with open_index(late_index) as index:
        alone = index.search(
            "where is the public endpoint of the tunnel server",
            late_depth=5,
            late_weight=1.0,
            explain=True,
            limit=5,
        )
    maxsims = [r.explain["late_score"] for r in alone if r.explain["late_score"] is not None]
    assert maxsims == sorted(maxsims, reverse=True)


def test_store_memory_stores_the_new_texts_token_vectors_alone(late_index, tmp_path):
    import shutil

    index_dir = tmp_path / "copy"
    shutil.copytree(late_index, index_dir)
    before = _store(index_dir).stored()
    writer = MemoryWriter(index_dir)
    try:
        memory = make_memory("The backup job runs at 3am on the NAS.", tags=["ops"])
        writer.store_document(memory)
    finally:
        writer.close()
    after = _store(index_dir).stored()
    assert len(after - before) >= 1  # only the new memory's texts were encoded
    assert before <= after
    with open_index(index_dir) as index:
        hits = index.search("when does the backup run", late_depth=10, explain=True)
        assert index.query_models.late_scorer(index.snapshot(), "colbert").encoded_now == 0
    assert hits[0].doc_id == memory.doc_id
    assert verify(index_dir) == []


def test_verify_finds_missing_or_damaged_token_vectors_and_repair_encodes_them(late_index, tmp_path):
    import shutil

    index_dir = tmp_path / "copy"
    shutil.copytree(late_index, index_dir)
    folder = _store(index_dir).folder
    keys = sorted(folder.glob("*.keys.npy"))
    keys[0].write_bytes(b"not a numpy file")
    problems = verify(index_dir)
    assert problems and "token vectors" in problems[0]
    actions = repair(index_dir)
    assert any("unreadable token-vector shards" in a for a in actions)
    assert any("encoded the token vectors" in a for a in actions)
    assert verify(index_dir) == []


def test_optimize_drops_the_token_vectors_of_deleted_chunks(late_index, tmp_path):
    import shutil

    from hybridlab.index.write.build import optimize

    index_dir = tmp_path / "copy"
    shutil.copytree(late_index, index_dir)
    writer = MemoryWriter(index_dir)
    try:
        gone = make_memory("A memory that will be deleted soon, about kayaks.", tags=["tmp"])
        writer.store_document(gone)
        writer.delete([gone.doc_id])
    finally:
        writer.close()
    with_deleted = _store(index_dir).stored()
    optimize(index_dir)
    kept = _store(index_dir).stored()
    assert kept < with_deleted and _store(index_dir).shard_count == 1
    assert verify(index_dir) == []


# ------------------------------------------------------------------ a PyLate / ColBERT folder
def write_pylate_folder(folder: Path) -> Path:
    """A tiny random BERT saved as PyLate saves a ColBERT model: the transformer at the top, a
    `1_Dense` projection without bias, [Q]/[D] marker tokens and PyLate's lengths."""
    transformers = pytest.importorskip("transformers")
    from safetensors.numpy import save_file

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[Q]", "[D]", "the", "cat", "dog", "sat", ",", "."]
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    transformers.BertModel(config).save_pretrained(folder)
    from tokenizers import BertWordPieceTokenizer

    BertWordPieceTokenizer(str(folder / "vocab.txt"), lowercase=True).save(str(folder / "tokenizer.json"))
    (folder / "1_Dense").mkdir()
    (folder / "1_Dense" / "config.json").write_text(
        json.dumps({"in_features": 16, "out_features": 8, "bias": False})
    )
    rng = np.random.default_rng(0)
    save_file(
        {"linear.weight": rng.standard_normal((8, 16)).astype(np.float32)},
        str(folder / "1_Dense" / "model.safetensors"),
    )
    (folder / "config_sentence_transformers.json").write_text(
        json.dumps(
            {"query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": 32, "document_length": 180}
        )
    )
    return folder


def test_a_pylate_folder_is_read_by_its_own_conventions(tmp_path):
    folder = write_pylate_folder(tmp_path / "tiny-colbert")
    spec = get_late_spec(str(folder))
    assert spec.backend == "pylate" and spec.dims == 8
    assert (spec.query_length, spec.document_length) == (32, 180)
    assert spec.query_marker == 5 and spec.document_marker == 6  # [Q], [D]
    encoder = load_late_encoder(spec)
    doc = encoder.encode_documents(["the cat sat, the dog sat."])[0]
    assert doc.shape == (2 + 6 + 1, 8)  # [CLS] [D] six words (punctuation masked) [SEP]
    assert np.allclose(np.linalg.norm(doc, axis=1), 1.0, atol=1e-5)
    query = encoder.encode_query("the cat")
    assert maxsim(query, [doc])[0] > 0


def test_an_unknown_late_model_names_the_choices(tmp_path):
    with pytest.raises(InvalidValueError, match="does not exist"):
        get_late_spec(str(tmp_path / "nope"))


def test_builds_in_a_shared_token_store_block_encode_each_text_once(tmp_path, monkeypatch):
    from hybridlab.index.write import tokens
    from hybridlab.index.write.tokens import shared_token_stores

    source = write_memories(tmp_path / "memories.jsonl")
    config = IndexConfig(models=("wordllama",), late_models=("colbert",))
    with shared_token_stores(tmp_path / "shared"):
        first = index_paths(
            [source], tmp_path / "one", config, progress=False, cache_path=tmp_path / "e.duckdb"
        )
        spec = get_late_spec("colbert")
        shared = TokenStore(tmp_path / "shared" / spec.key).stored()
        monkeypatch.setattr(tokens, "load_late_encoder", lambda spec: pytest.fail("encoded again"))
        second = index_paths(
            [source], tmp_path / "two", config, progress=False, cache_path=tmp_path / "e.duckdb"
        )
    assert first.committed and second.committed and shared
    assert _store(tmp_path / "two").stored() == _store(tmp_path / "one").stored() == shared


def test_warming_loads_the_stored_late_models_query_encoder(late_index):
    with open_index(late_index) as index:
        index.query_models.warm_late(index.snapshot(), ["what is the tunnel endpoint"])
        scorer = index.query_models.late_scorer(index.snapshot(), "answerai-colbert-small")
        cached = index.query_models._late_queries.get((scorer.spec.key, "what is the tunnel endpoint"))
    assert cached is not None and cached.shape[1] == 128
