"""Security properties: no pickle in load paths, index files parsed (never executed), documents
looked up by id (no path access), the HTTP transport on loopback by default."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hybridlab"
UNSAFE = re.compile(
    r"\b(import pickle|from pickle|pickle\.loads?|cPickle|dill|joblib|torch\.load|cloudpickle|"
    r"marshal\.loads?|shelve|(?<![.\w])eval\(|(?<![.\w])exec\(|yaml\.load\()"
)
NP_LOAD = re.compile(r"\bnp\.load\((?P<args>[^)]*)\)")


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_pickle_or_code_execution_in_the_package():
    found = []
    for path in _sources():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if UNSAFE.search(code) and "safe_load" not in code:
                found.append(f"{path.name}:{number}: {line.strip()}")
    assert found == []


def test_every_np_load_refuses_pickles():
    found = []
    for path in _sources():
        for match in NP_LOAD.finditer(path.read_text(encoding="utf-8")):
            if "allow_pickle=False" not in match.group("args"):
                found.append(f"{path.name}: {match.group(0)}")
    assert found == []


def test_bm25s_load_does_not_unpickle(small_index, tmp_path, monkeypatch):
    """Loading an index never calls pickle (bm25s saves .npy/.json; np.load would need allow_pickle)."""
    import pickle

    from hybridlab.search.engine import open_index

    def refuse(*_args, **_kwargs):
        raise AssertionError("pickle used while loading an index")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    index_dir = tmp_path / "index"
    shutil.copytree(small_index, index_dir)
    open_index(index_dir).close()


def test_an_object_array_in_bm25_ids_is_refused(small_index, tmp_path):
    """A crafted ids.npy holding pickled objects is refused (never unpickled), with the repair hint."""
    import json

    import numpy as np

    from hybridlab.index.format import layout
    from hybridlab.search.engine import open_index

    index_dir = tmp_path / "index"
    shutil.copytree(small_index, index_dir)
    manifest = json.loads((index_dir / layout.MANIFEST).read_text())
    manifest.pop("files")  # as if the attacker also rewrote the checksums away
    (index_dir / layout.MANIFEST).write_text(json.dumps(manifest))
    np.save(
        index_dir / manifest["path"] / "bm25" / "ids.npy",
        np.array([object()], dtype=object),
        allow_pickle=True,
    )
    with pytest.raises(layout.CorruptIndexError, match="verify --repair"):
        open_index(index_dir)


@pytest.mark.parametrize(
    "doc_id",
    [
        "../../etc/passwd",
        "/etc/passwd",
        "..",
        "manifest.json",
        "gen-000001/store.duckdb",
        "doc0001.md/../../../x",
        "%2e%2e/%2e%2e",
    ],
)
def test_get_document_cannot_escape_the_index(small_index, doc_id):
    from hybridlab.search.engine import open_index

    index = open_index(small_index)
    try:
        with pytest.raises(KeyError, match="no document"):
            index.get_document(doc_id)
        assert index.get_document("doc0001.md").doc_id == "doc0001.md"
    finally:
        index.close()


def test_mcp_http_binds_to_loopback_by_default():
    from hybridlab.cli import build_parser

    args = build_parser().parse_args(["mcp", "--index", "x"])
    assert getattr(args, "host", "127.0.0.1") in {"127.0.0.1", "localhost", "::1"}


def test_lone_surrogates_in_a_memory_are_stored_or_refused_clearly(small_index, tmp_path):
    from hybridlab.index.admin.verify import verify
    from hybridlab.index.write.memory import MemoryWriter

    index_dir = tmp_path / "index"
    shutil.copytree(small_index, index_dir)
    writer = MemoryWriter(index_dir)
    try:
        writer.store("broken \ud800 surrogate memory", ["odd"])
    except ValueError as error:
        assert str(error)
    assert verify(index_dir) == []
