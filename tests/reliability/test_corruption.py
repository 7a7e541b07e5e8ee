"""Corrupt or truncated index files give a clear error naming the file and the repair command (never
a crash or a silent wrong answer), `hybridlab verify` reports them and `--repair` restores the index."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from hybridlab.index.admin.verify import repair, verify
from hybridlab.index.format import layout
from hybridlab.search.engine import open_index

from .helpers import MODEL_ARGS, cli, record, snapshot, write_corpus

REPAIR = "verify --repair"


@pytest.fixture(scope="module")
def two_generations(tmp_path_factory):
    """An index with a previous generation kept (two runs), and the results of each."""
    root = tmp_path_factory.mktemp("corrupt")
    corpus = root / "corpus"
    write_corpus(corpus, range(60))
    index = root / "index"
    cli("index", str(corpus), "--index", str(index), *MODEL_ARGS, "-q")
    first = snapshot(index)
    write_corpus(corpus, range(60, 80))
    cli("index", str(corpus), "--index", str(index), *MODEL_ARGS, "-q")
    assert [p.name for p in layout.generations(index)] == ["gen-000001", "gen-000002"]
    return {"index": index, "first": first, "live": snapshot(index)}


def truncate(path: Path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def garble(path: Path) -> None:
    """Flip bytes in the middle of the file, keeping its size."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for i in range(middle, min(len(data), middle + 64)):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


# the second run adds a small segment: its rows are Parquet tables (documents, chunks, ...), not a store.duckdb
STORE = "chunks.parquet"
STORE_FILES = ("chunks.parquet", "documents.parquet", "tags.parquet", "chunk_vectors.parquet", "meta.parquet")
DAMAGE = {
    "truncate-0": lambda p: truncate(p, 0.0),
    "truncate-half": lambda p: truncate(p, 0.5),
    "garble": garble,
}
BM25_FILES = (
    "bm25/data.csc.index.npy",
    "bm25/indices.csc.index.npy",
    "bm25/indptr.csc.index.npy",
    "bm25/ids.npy",
    "bm25/vocab.index.json",
    "bm25/params.index.json",
    "bm25/tokenizer.json",
)
# every damage of the FAISS and DuckDB files; each BM25 file truncated, two of them also emptied/garbled
CASES = (
    [(name, damage) for name in ("dense-wordllama.faiss", STORE) for damage in sorted(DAMAGE)]
    + [(name, "truncate-half") for name in STORE_FILES if name != STORE]
    + [(name, "truncate-half") for name in BM25_FILES]
    + [
        ("bm25/data.csc.index.npy", "garble"),
        ("bm25/ids.npy", "truncate-0"),
        ("bm25/vocab.index.json", "garble"),
    ]
)


def _expect_clear_error(index_dir: Path, path: Path) -> str:
    with pytest.raises(layout.CorruptIndexError) as caught:
        open_index(index_dir)
    message = str(caught.value)
    assert str(path) in message and REPAIR in message
    return message


@pytest.mark.parametrize(("name", "damage"), CASES)
def test_damaged_generation_file(two_generations, tmp_path, name, damage):
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    path = index / "gen-000002" / name
    DAMAGE[damage](path)
    _expect_clear_error(index, path)
    problems = verify(index)
    assert problems and str(path) in problems[0]
    actions = repair(index)
    assert actions and verify(index) == []
    # the store is the source of truth: a damaged store falls back to the previous generation
    expected = two_generations["first"] if name in STORE_FILES else two_generations["live"]
    assert snapshot(index) == expected


@pytest.mark.parametrize(
    "damage", ["truncate-0", "truncate-half", "garble", "delete", "not-a-manifest", "dangling"]
)
def test_damaged_manifest(two_generations, tmp_path, damage):
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    path = index / layout.MANIFEST
    if damage == "delete":
        path.unlink()
    elif damage == "not-a-manifest":
        path.write_text(json.dumps({"hello": "world"}))
    elif damage == "dangling":
        manifest = json.loads(path.read_text())
        path.write_text(json.dumps({**manifest, "path": "gen-000099"}))
        path = index / "gen-000099"
    else:
        DAMAGE[damage](path)
    _expect_clear_error(index, path)
    assert verify(index)
    repair(index)
    assert verify(index) == []
    assert snapshot(index) == two_generations["live"]


def test_missing_faiss_file(two_generations, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    path = index / "gen-000002" / "dense-wordllama.faiss"
    path.unlink()
    _expect_clear_error(index, path)
    repair(index)
    assert snapshot(index) == two_generations["live"]


def test_store_corrupt_without_previous_generation_is_not_repairable(two_generations, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    shutil.rmtree(index / "gen-000001")
    truncate(index / "gen-000002" / STORE, 0.5)
    with pytest.raises(layout.CorruptIndexError, match="rebuild the index from its sources"):
        repair(index)


def test_index_refuses_to_write_over_a_lost_manifest(two_generations, tmp_path):
    """`index` into a folder whose manifest is gone must not wipe the generations (stored memories
    would be lost): it names the repair instead."""
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    (index / layout.MANIFEST).unlink()
    corpus = tmp_path / "c"
    write_corpus(corpus, range(3))
    result = cli("index", str(corpus), "--index", str(index), *MODEL_ARGS, "-q", check=False)
    assert result.returncode == 2 and REPAIR in result.stderr
    assert len(layout.generations(index)) == 2


def test_corrupt_embeddings_cache(two_generations, tmp_path):
    """Search does not read the cache; verify reports it; repair moves it aside and re-embeds."""
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    garble(index / layout.CACHE_FILE)
    truncate(index / layout.CACHE_FILE, 0.3)
    assert snapshot(index) == two_generations["live"]
    assert any("embeddings cache" in p for p in verify(index))
    actions = repair(index)
    assert any("moved the corrupt embeddings cache aside" in a for a in actions)
    assert verify(index) == []


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.5, 0.99])
def test_truncated_faiss_without_checksums_in_subprocess(two_generations, tmp_path, keep):
    """A manifest from before checksums: FAISS itself must parse the truncated file. Run in a
    subprocess so that a segfault would show as a signal exit, not kill the test run."""
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    manifest = json.loads((index / layout.MANIFEST).read_text())
    manifest.pop("files")
    (index / layout.MANIFEST).write_text(json.dumps(manifest))
    path = index / "gen-000002" / "dense-wordllama.faiss"
    truncate(path, keep)
    result = cli("search", "panel widget", "--index", str(index), check=False)
    assert result.returncode == 2, (result.returncode, result.stderr[-500:])
    assert str(path) in result.stderr and REPAIR in result.stderr


def test_cli_verify_exit_codes(two_generations, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    ok = cli("verify", "--index", str(index))
    assert ok.returncode == 0 and ok.stdout.startswith("OK")
    garble(index / "gen-000002" / "dense-wordllama.faiss")
    bad = cli("verify", "--index", str(index), "--json", check=False)
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    assert report["ok"] is False and "dense-wordllama.faiss" in report["problems"][0]
    fixed = cli("verify", "--index", str(index), "--repair")
    assert fixed.returncode == 0 and "repaired:" in fixed.stdout and "OK" in fixed.stdout


def _count_hashes(monkeypatch) -> list[str]:
    hashed: list[str] = []
    real = layout.file_sha256
    monkeypatch.setattr(layout, "file_sha256", lambda path: hashed.append(Path(path).name) or real(path))
    return hashed


def test_reopening_hashes_only_files_that_changed(two_generations, tmp_path, monkeypatch):
    """Open hashes every file once; a reopen of unchanged, settled files only stats them; a copy (new
    inodes) is hashed again; `verify` always hashes everything."""
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    files = json.loads((index / layout.MANIFEST).read_text())["files"]
    hashed = _count_hashes(monkeypatch)
    open_index(index).close()
    assert len(hashed) == len(files)
    hashed.clear()
    open_index(index).close()  # the files were written just now: not settled, hashed again
    assert len(hashed) == len(files)
    monkeypatch.setattr(layout, "SETTLED_NS", 0)
    open_index(index).close()
    hashed.clear()
    open_index(index).close()
    assert hashed == []
    copy = tmp_path / "copy"
    shutil.copytree(index, copy)
    open_index(copy).close()
    assert len(hashed) == len(files)
    hashed.clear()
    assert verify(index) == [] and len(hashed) >= len(files)


@pytest.mark.parametrize("name", [STORE, "dense-wordllama.faiss"])
def test_a_file_garbled_after_a_clean_open_is_caught_even_with_its_mtime_put_back(
    two_generations, tmp_path, monkeypatch, name
):
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    monkeypatch.setattr(layout, "SETTLED_NS", 0)
    open_index(index).close()
    assert json.loads((index / layout.VERIFIED_FILE).read_text())["files"]
    time.sleep(0.05)  # past the file system's clock tick
    path = index / "gen-000002" / name
    before = path.stat()
    garble(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns
    _expect_clear_error(index, path)


def test_a_damaged_verified_record_is_ignored(two_generations, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(two_generations["index"], index)
    (index / layout.VERIFIED_FILE).write_text("{not json")
    open_index(index).close()
    path = index / "gen-000002" / STORE
    (index / layout.VERIFIED_FILE).write_text(json.dumps({"path": "gen-000002", "files": {STORE: "x"}}))
    garble(path)
    _expect_clear_error(index, path)


def test_record_corruption_figures():
    """Count of corruption cases, for reports/reliability.md."""
    cases = len(CASES) + 6 + 1 + 1 + 1 + 1 + 4 + 1 + 2 + 1
    record("corruption_cases", cases)
