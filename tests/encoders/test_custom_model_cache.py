"""The embeddings cache keys a sentence-transformers folder's vectors by its revision (issue 30):
after the folder's weights change, `reindex --drop-model M` then `reindex --model M` embeds the
texts again with the new weights (the old vectors stay cached under the old revision and are
never served for the new one); registry presets keep their plain-name keys. Nothing downloads."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from hybridlab import cli
from hybridlab.encoders.registry import encoder_record, load_encoder
from hybridlab.index.format.embedding_cache import EmbeddingCache, cache_model
from tests.encoders.test_custom_models import DOCS, pytestmark, save_tiny_model  # noqa: F401

QUERY = "vitamin D fractures"


def _reseed(folder, seed: int) -> None:
    """The same architecture and tokenizer, re-initialised with another seed (new weights)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    BertModel(BertConfig.from_pretrained(folder)).save_pretrained(folder)


def _vectors(index_dir, model: str) -> dict[str, np.ndarray]:
    """Doc id -> its (one chunk's) vector of `model` in the index, and the query's vector."""
    from hybridlab.search.engine import open_index

    with open_index(index_dir) as index:
        dense = index.dense[model]
        rows = index._con.execute("SELECT chunk_id, doc_id, embed_text FROM chunks").fetchall()
        doc_of = {chunk: doc for chunk, doc, _ in rows}
        out = {doc_of[int(i)]: np.array(v) for i, v in zip(dense.ids, dense.vectors, strict=True)}
        out["@texts"] = {doc: text for _, doc, text in rows}
        out["@query"] = np.array(index.query_models.query_vector(index.snapshot(), model, QUERY))
        out["@hits"] = index.search(QUERY, embedding_model=model, mode="vector", limit=3)
        out["@stats"] = index.stats().to_dict()["models"]
    return out


def _summary_counts(text: str) -> tuple[int, int]:
    embedded, cached = re.search(r"(\d+) embedded, (\d+) from cache", text).groups()
    return int(embedded), int(cached)


def test_changed_weights_are_embedded_again_after_drop_and_readd(tmp_path, capsys):
    keep = save_tiny_model(tmp_path / "keep")  # a second model: the last one cannot be dropped
    (tmp_path / "changing").mkdir()
    changing = save_tiny_model(tmp_path / "changing" / "model")
    data = tmp_path / "data"
    data.mkdir()
    (data / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": d, "title": title, "text": text}) + "\n" for d, (title, text) in DOCS.items()
        )
    )
    index = tmp_path / "index"
    assert (
        cli.main(["index", str(data), "--index", str(index), "--model", keep, "--model", changing, "-q"]) == 0
    )
    name, kept = "model", "keep"  # folder models are recorded by their folders' names (issue 40)
    old_revision = encoder_record(changing)["revision"]
    assert cache_model(name) == f"{name}@{old_revision}"
    old = _vectors(index, name)

    _reseed(changing, seed=1)
    new_revision = encoder_record(changing)["revision"]
    assert new_revision != old_revision and cache_model(name) == f"{name}@{new_revision}"
    capsys.readouterr()
    assert cli.main(["reindex", "--index", str(index), "--drop-model", changing, "-q"]) == 0
    assert cli.main(["reindex", "--index", str(index), "--model", changing, "-q"]) == 0
    embedded, cached = _summary_counts(capsys.readouterr().out.splitlines()[-1])
    assert embedded == len(DOCS) and cached == len(DOCS)  # the new weights' 3 embedded; keep's 3 cached

    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["models"][name]["encoder"]["revision"] == new_revision
    new = _vectors(index, name)
    docs = sorted(DOCS)
    expected = load_encoder(changing).encode_documents([new["@texts"][doc] for doc in docs])
    for doc, vector in zip(docs, expected, strict=True):
        assert not np.allclose(new[doc], old[doc], atol=1e-4)  # not the old weights' vectors
        assert np.allclose(new[doc], vector, atol=1e-5)  # the new weights' ones
    # search embeds the query with the new weights and ranks by the new document vectors
    assert not np.allclose(new["@query"], old["@query"], atol=1e-4)
    scores = {hit.doc_id: hit.score for hit in new["@hits"]}
    for doc in DOCS:
        assert scores[doc] == pytest.approx(float(new[doc] @ new["@query"]), abs=1e-4)

    # stats shows each model's encoder spec as the manifest records it (the MCP stats tool delegates to it)
    assert old["@stats"][name]["encoder"]["revision"] == old_revision
    assert new["@stats"][name]["encoder"] == manifest["models"][name]["encoder"]
    assert new["@stats"][kept]["encoder"] == manifest["models"][kept]["encoder"] == encoder_record(keep)
    assert (new["@stats"][name]["dim"], new["@stats"][name]["vectors"]) == (32, len(DOCS))

    # both revisions' vectors are kept, each under its own key; nothing under the bare name
    cache = EmbeddingCache(manifest["embedding_cache"], read_only=True)
    try:
        assert (
            cache.count(f"{name}@{old_revision}"),
            cache.count(f"{name}@{new_revision}"),
            cache.count(name),
        ) == (len(DOCS), len(DOCS), 0)
    finally:
        cache.close()


def test_registry_presets_keep_their_plain_keys():
    assert cache_model("all-MiniLM-L6-v2") == "all-MiniLM-L6-v2"
    assert cache_model("wordllama") == "wordllama"
