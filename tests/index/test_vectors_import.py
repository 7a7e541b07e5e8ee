"""Vectors computed elsewhere (issue 30): document vectors made with the tiny test model outside the
index, imported with `index --vectors` (Parquet), and query vectors read with `eval --query-vectors`
(.npy + ids), give the run of the same model computed in process, under the model itself or under
a name that does not load here (an external spec); chunk vectors into an existing index; bad files
refused with the row named and the previous index intact. Nothing downloads."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from hybridlab import cli
from hybridlab.encoders.registry import load_encoder
from tests.encoders.test_custom_models import DOCS, QRELS, QUERIES, pytestmark, save_tiny_model  # noqa: F401


def _write_parquet(path, ids, vectors) -> None:
    import duckdb
    import pandas as pd

    con = duckdb.connect()
    con.register("rows", pd.DataFrame({"id": list(ids), "vector": [list(map(float, v)) for v in vectors]}))
    con.execute(f"COPY (SELECT id, vector::FLOAT[] AS vector FROM rows) TO '{path}' (FORMAT parquet)")
    con.close()


def _write_npy(path, ids, vectors) -> None:
    np.save(path, np.asarray(vectors, dtype=np.float32))
    path.with_name(path.stem + ".ids.txt").write_text("\n".join(ids) + "\n")


def _chunks(index_dir) -> list[tuple[int, str, str]]:
    from hybridlab.search.engine import open_index

    with open_index(index_dir) as index:
        return index._con.execute(
            "SELECT chunk_id, doc_id, embed_text FROM chunks ORDER BY chunk_id"
        ).fetchall()


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The tiny model, a 3-document dataset, an index embedded in process, and vector files made
    outside it by the same model: documents (Parquet), chunks (Parquet), queries (.npy + ids)."""
    root = tmp_path_factory.mktemp("vectors")
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
    index = root / "in-process"
    assert cli.main(["index", str(data), "--index", str(index), "--model", model, "-q"]) == 0
    chunks = _chunks(index)
    encoder = load_encoder(model)
    vectors = encoder.encode_documents([text for _, _, text in chunks])
    _write_parquet(root / "docs.parquet", [doc for _, doc, _ in chunks], vectors)
    _write_parquet(root / "chunks.parquet", [str(chunk) for chunk, _, _ in chunks], vectors)
    _write_npy(root / "queries.npy", list(QUERIES), encoder.encode_queries(list(QUERIES.values())))
    return {"root": root, "model": model, "data": data, "index": index, "chunks": chunks, "vectors": vectors}


def _eval(made, index_dir, run_file, *extra) -> int:
    return cli.main(
        [
            "eval",
            "--index",
            str(index_dir),
            "--queries",
            str(made["data"] / "queries.jsonl"),
            "--qrels",
            str(made["data"] / "qrels.tsv"),
            "--save-run",
            str(run_file),
            "--json",
            "-q",
            *extra,
        ]
    )


def _run(path) -> dict[str, list[tuple[str, float]]]:
    run: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, []).append((doc, float(score)))
    return run


def _same_run(a, b) -> None:
    assert a.keys() == b.keys()
    for qid in a:
        assert [doc for doc, _ in a[qid]] == [doc for doc, _ in b[qid]]
        assert np.allclose([s for _, s in a[qid]], [s for _, s in b[qid]], atol=1e-5)


@pytest.fixture(scope="module")
def baseline(made):
    run = made["root"] / "in-process.run"
    assert _eval(made, made["index"], run) == 0
    return _run(run)


@pytest.mark.parametrize("name", ["model", "external"])
def test_imported_vectors_give_the_in_process_run(made, baseline, name, tmp_path, capsys):
    from hybridlab.search.engine import open_index

    model = made["model"] if name == "model" else "elsewhere-bert"
    index = tmp_path / "imported"
    capsys.readouterr()
    assert (
        cli.main(
            [
                "index",
                str(made["data"]),
                "--index",
                str(index),
                "--model",
                model,
                "--vectors",
                str(made["root"] / "docs.parquet"),
                "-q",
            ]
        )
        == 0
    )
    assert "0 embedded, 3 imported, 0 from cache" in capsys.readouterr().out
    key = "tiny-bert" if name == "model" else model  # a folder is recorded by its name (issue 40)
    record = json.loads((index / "manifest.json").read_text())["models"][key]
    assert record["dim"] == 32 and record["vectors"] == 3
    if name == "external":
        assert {k: record["encoder"][k] for k in ("name", "source", "backend", "dim")} == {
            "name": model,
            "source": "external",
            "backend": "external",
            "dim": 32,
        }
    with open_index(index) as opened:
        dense = opened.dense[key]
        by_chunk = dict(zip(dense.ids.tolist(), dense.vectors, strict=True))
        for (chunk, _, _), vector in zip(made["chunks"], made["vectors"], strict=True):
            assert np.allclose(by_chunk[chunk], vector, atol=1e-6)
    run = tmp_path / "imported.run"
    assert _eval(made, index, run, "--query-vectors", str(made["root"] / "queries.npy")) == 0
    _same_run(_run(run), baseline)
    if name == "external":  # no query vectors: the model cannot encode here, said clearly
        capsys.readouterr()
        assert _eval(made, index, tmp_path / "none.run", "--mode", "vector") == 2
        assert f"model {model!r} is external" in capsys.readouterr().err


def test_chunk_vectors_into_an_existing_index(made, baseline, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(made["index"], index)
    assert (
        cli.main(
            [
                "index",
                "--index",
                str(index),
                "--model",
                "chunk-vectors",
                "--vectors-by",
                "chunk",
                "--vectors",
                str(made["root"] / "chunks.parquet"),
                "-q",
            ]
        )
        == 0
    )
    assert list(json.loads((index / "manifest.json").read_text())["models"]) == ["chunk-vectors"]
    run = tmp_path / "chunks.run"
    assert _eval(made, index, run, "--query-vectors", str(made["root"] / "queries.npy")) == 0
    _same_run(_run(run), baseline)


def _bad_files(made, root):
    """(file, expected message part) for each kind of bad vectors file."""
    ids = [doc for _, doc, _ in made["chunks"]]
    good = made["vectors"]
    nan = good.copy()
    nan[1, 3] = np.nan
    cases = {
        "wrong-dim.parquet": (ids, good[:, :16], "holds 16-d vectors but model 'outside' gives 32-d"),
        "ragged.parquet": (
            ids,
            [good[0], good[1][:31], good[2]],
            "row 1 (id 'd2') has 31 values, expected 32",
        ),
        "unknown.parquet": ([*ids[:2], "d9"], good, "row 2 (id 'd9') is not a document id of the index"),
        "missing.parquet": (ids[:2], good[:2], f"no vector for document {ids[2]!r} (1 of the index's 3"),
        "nan.npy": (ids, nan, "row 1 (id 'd2') has a value that is not finite"),
        "twice.npy": ([ids[0], ids[1], ids[1]], good, "row 2 (id 'd2') has an id given before"),
    }
    for file, (rows, vectors, message) in cases.items():
        (_write_npy if file.endswith(".npy") else _write_parquet)(root / file, rows, vectors)
        yield root / file, message


def test_bad_vector_files_are_refused_and_the_index_kept(made, tmp_path, capsys):
    from hybridlab.search.engine import open_index

    index = tmp_path / "index"
    assert (
        cli.main(
            [
                "index",
                str(made["data"]),
                "--index",
                str(index),
                "--model",
                "outside",
                "--vectors",
                str(made["root"] / "docs.parquet"),
                "-q",
            ]
        )
        == 0
    )
    before = (index / "manifest.json").read_text()
    for path, message in _bad_files(made, tmp_path):
        capsys.readouterr()
        assert (
            cli.main(["index", "--index", str(index), "--model", "outside", "--vectors", str(path), "-q"])
            == 2
        )
        err = capsys.readouterr().err
        assert message in err, (path.name, err)
        assert (index / "manifest.json").read_text() == before
        assert not list(index.glob("gen-*.tmp-*"))
    with open_index(index) as opened:  # the previous index still answers, its vectors as imported
        assert opened.search("aspirin", mode="bm25", limit=1)[0].doc_id == "d2"
        query = load_encoder(made["model"]).encode_queries(["aspirin heart attack"])
        opened.query_models.put_query_vectors("outside", {"aspirin heart attack": query[0]})
        assert len(opened.search("aspirin heart attack", mode="vector", limit=3)) == 3
    capsys.readouterr()
    assert _eval(made, index, tmp_path / "x.run", "--query-vectors", str(tmp_path / "twice.npy")) == 2
    assert "row 2 (id 'd2') has an id given before" in capsys.readouterr().err
