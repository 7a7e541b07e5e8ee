"""Re-indexing a folder reads only the files whose signature (size, inode, mtime, ctime) changed since
the index recorded it; racy files (changed within `layout.SETTLED_NS` of their reading) are read
again; deletes still tombstone; and the result answers like a fresh full build of the folder."""

from __future__ import annotations

import json
import os
import random
import shutil
import time

import pytest

from hybridlab.config import IndexConfig
from hybridlab.index.format import layout
from hybridlab.index.format.manifest import Manifest
from hybridlab.index.format.signatures import recorded_signatures
from hybridlab.index.write import merge
from hybridlab.index.write.build import index_paths, optimize
from hybridlab.ingest import sources
from hybridlab.search.engine import open_index

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "panel",
    "holoviews",
    "bokeh",
    "widget",
    "plot",
    "layout",
    "stream",
    "param",
    "server",
    "notebook",
    "table",
    "chart",
    "slider",
    "data",
    "frame",
    "vector",
    "search",
    "cache",
]
QUERIES = ("panel widget", "holoviews stream plot", "data frame table", "vector search cache", "slider chart")
NOW = "2026-11-01T00:00:00Z"
CONFIG = IndexConfig(models=("wordllama",), graph_k=3)
MTIME = 1_760_000_000_000_000_000  # 2025-10-09: every file gets its own mtime from here


def _markdown(rng: random.Random, title: str) -> str:
    sections = [f"# {title}\n"]
    for s in range(rng.randint(1, 3)):
        sections.append(f"## Part {s}\n\n{' '.join(rng.choice(WORDS) for _ in range(rng.randint(4, 30)))}\n")
    return "\n".join(sections)


class Folder:
    """A folder of markdown files whose every write gets a distinct mtime (as files edited over time)."""

    def __init__(self, root, data_dir=None):
        self.root = root
        self.clock = MTIME
        root.mkdir(parents=True, exist_ok=True)
        if data_dir is not None:  # a notebook, whose reading goes through nbformat
            (root / "nb").mkdir()
            shutil.copy(
                data_dir / "corpus" / "docs" / "hvplot" / "scatter.ipynb", root / "nb" / "scatter.ipynb"
            )

    def write(self, name: str, text: str) -> None:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        self.clock += 1_000_000_000
        os.utime(path, ns=(self.clock, self.clock))


@pytest.fixture
def settled(monkeypatch):
    """No racy window: files written by the test count as settled at once (each write above moves mtime)."""
    monkeypatch.setattr(layout, "SETTLED_NS", 0)


@pytest.fixture
def reads(monkeypatch):
    """The doc ids `read_document_file` reads, in order."""
    seen: list[str] = []
    original = sources.read_document_file

    def counting(path, doc_id, *args, **kwargs):
        seen.append(doc_id)
        return original(path, doc_id, *args, **kwargs)

    monkeypatch.setattr(sources, "read_document_file", counting)
    return seen


def _index(folder: Folder, index_dir, cache, **options):
    return index_paths([folder.root], index_dir, CONFIG, progress=False, cache_path=cache, **options)


def _runs(index_dir) -> dict[tuple[str, str], dict[str, float]]:
    runs = {}
    with open_index(index_dir) as index:
        for query in QUERIES:
            for name, options in (
                ("bm25", {"mode": "bm25"}),
                ("vector", {"mode": "vector"}),
                ("hybrid", {"mode": "hybrid", "staged": False}),
                ("staged", {"mode": "hybrid", "staged": True, "expand_hops": 2, "candidates": 5}),
            ):
                runs[(query, name)] = index.run(query, now=NOW, depth=1000, limit=1000, **options)
    return runs


def _assert_same(got, expected):
    assert got.keys() == expected.keys()
    for key, run in expected.items():
        assert got[key].keys() == run.keys(), key
        for doc_id, score in run.items():
            assert got[key][doc_id] == pytest.approx(score, abs=1e-6), (key, doc_id)


def test_unchanged_files_are_not_read(tmp_path, embedding_cache_path, data_dir, settled, reads):
    folder = Folder(tmp_path / "docs", data_dir)
    rng = random.Random(1)
    for i in range(6):
        folder.write(f"sub/note-{i}.md", _markdown(rng, f"Note {i}"))
    index_dir = tmp_path / "index"
    first = _index(folder, index_dir, embedding_cache_path)
    assert first.added == 7 and len(reads) == 7
    source = str(folder.root.resolve())
    assert set(recorded_signatures(index_dir)[source]) == {
        "nb/scatter.ipynb",
        *(f"sub/note-{i}.md" for i in range(6)),
    }

    reads.clear()
    again = _index(folder, index_dir, embedding_cache_path)
    assert reads == [] and not again.committed
    assert (again.documents, again.unchanged, again.added, again.changed, again.removed) == (7, 7, 0, 0, 0)

    folder.write("sub/note-2.md", _markdown(rng, "Note 2") + "\nzebrafinch appended\n")
    update = _index(folder, index_dir, embedding_cache_path)
    assert reads == ["sub/note-2.md"]
    assert (update.documents, update.unchanged, update.changed, update.committed) == (7, 6, 1, True)
    with open_index(index_dir) as index:
        assert [hit.doc_id for hit in index.search("zebrafinch", mode="bm25", limit=3)] == ["sub/note-2.md"]

    reads.clear()
    _index(folder, index_dir, embedding_cache_path)
    assert reads == []  # the changed file's new signature was recorded by the write


def test_check_content_and_force_read_every_file(tmp_path, embedding_cache_path, settled, reads):
    folder = Folder(tmp_path / "docs")
    rng = random.Random(2)
    for i in range(4):
        folder.write(f"note-{i}.md", _markdown(rng, f"Note {i}"))
    index_dir = tmp_path / "index"
    _index(folder, index_dir, embedding_cache_path)
    reads.clear()
    checked = _index(folder, index_dir, embedding_cache_path, check_content=True)
    assert sorted(reads) == [f"note-{i}.md" for i in range(4)]
    assert checked.unchanged == 4 and not checked.committed
    reads.clear()
    forced = _index(folder, index_dir, embedding_cache_path, force=True)
    assert len(reads) == 4 and forced.committed
    reads.clear()
    _index(folder, index_dir, embedding_cache_path)
    assert reads == []  # the forced write recorded every signature again


def test_a_racy_same_size_edit_with_its_mtime_put_back_is_read_again(
    tmp_path, embedding_cache_path, monkeypatch, reads
):
    """A file written within SETTLED_NS of its reading is not recorded: edited again in the same clock
    tick (same size, same mtime; ctime and inode ignored here, as on a file system with coarse
    timestamps), the next re-index still reads it and sees the new text."""
    monkeypatch.setattr(sources, "file_signature", lambda info: (info.st_size, info.st_mtime_ns))
    folder = Folder(tmp_path / "docs")
    folder.write("old.md", "# Old\n\nsettled text about panel widgets\n")
    time.sleep(layout.SETTLED_NS / 1e9 + 0.1)  # old.md settles (its ctime is when it was written)
    path = folder.root / "racy.md"
    path.write_text("# Racy\n\naaaa bbbb\n", encoding="utf-8")  # now: within the racy window
    index_dir = tmp_path / "index"
    _index(folder, index_dir, embedding_cache_path)
    assert set(recorded_signatures(index_dir)[str(folder.root.resolve())]) == {"old.md"}

    mtime = path.stat().st_mtime_ns
    path.write_text("# Racy\n\ncccc dddd\n", encoding="utf-8")  # same size
    os.utime(path, ns=(mtime, mtime))  # same mtime, as an edit within the same timestamp tick
    reads.clear()
    report = _index(folder, index_dir, embedding_cache_path)
    assert reads == ["racy.md"] and report.changed == 1
    with open_index(index_dir) as index:
        assert "cccc dddd" in index.get_document("racy.md").text


def test_deleted_files_are_tombstoned(tmp_path, embedding_cache_path, settled, reads):
    folder = Folder(tmp_path / "docs")
    rng = random.Random(3)
    for i in range(5):
        folder.write(f"note-{i}.md", _markdown(rng, f"Note {i}"))
    index_dir = tmp_path / "index"
    _index(folder, index_dir, embedding_cache_path)
    (folder.root / "note-3.md").unlink()
    reads.clear()
    report = _index(folder, index_dir, embedding_cache_path)
    assert reads == [] and (report.removed, report.unchanged, report.documents) == (1, 4, 4)
    manifest = layout.read_manifest(index_dir)
    assert "note-3.md" in manifest.segment_list[0].deleted
    assert "note-3.md" not in recorded_signatures(index_dir)[str(folder.root.resolve())]
    with open_index(index_dir) as index:
        assert index.stats().documents == 4


def test_an_index_without_signatures_reads_everything_and_records_them_on_its_next_write(
    tmp_path, embedding_cache_path, settled, reads
):
    folder = Folder(tmp_path / "docs")
    rng = random.Random(4)
    for i in range(4):
        folder.write(f"note-{i}.md", _markdown(rng, f"Note {i}"))
    index_dir = tmp_path / "index"
    _index(folder, index_dir, embedding_cache_path)
    manifest = json.loads((index_dir / layout.MANIFEST).read_text())  # as an index built before signatures
    del manifest["files"][manifest.pop("file_signatures")["file"]]
    layout.write_manifest(index_dir, Manifest.from_json(manifest))
    assert recorded_signatures(index_dir) == {}
    reads.clear()
    assert not _index(folder, index_dir, embedding_cache_path).committed
    assert len(reads) == 4
    folder.write("note-0.md", "# Note 0\n\nrewritten\n")
    reads.clear()
    assert _index(folder, index_dir, embedding_cache_path).committed and len(reads) == 4
    reads.clear()
    _index(folder, index_dir, embedding_cache_path)
    assert reads == []


def test_reindexes_answer_like_a_fresh_build_and_signatures_survive_merges(
    tmp_path, embedding_cache_path, monkeypatch, settled, reads
):
    """Random edits, touches, adds and deletes, each followed by a re-index (merges with a small merge
    factor), answer like a fresh build of the folder; signatures survive merges and `optimize`."""
    monkeypatch.setattr(merge, "MERGE_FACTOR", 3)
    rng = random.Random(5)
    folder = Folder(tmp_path / "docs")
    names = [f"d{i // 4}/note-{i}.md" for i in range(12)]
    for name in names:
        folder.write(name, _markdown(rng, name))
    index_dir = tmp_path / "index"
    _index(folder, index_dir, embedding_cache_path)
    counter = len(names)
    for _ in range(6):
        touched = set()
        for name in rng.sample(names, 2):  # edits
            folder.write(name, _markdown(rng, name))
            touched.add(name)
        name = rng.choice(names)  # a touch: a new mtime is a new updated_at
        os.utime(folder.root / name, ns=(folder.clock + 7, folder.clock + 7))
        touched.add(name)
        counter += 1
        names.append(f"d{counter % 3}/new-{counter}.md")  # an add
        folder.write(names[-1], _markdown(rng, names[-1]))
        touched.add(names[-1])
        gone = rng.choice([n for n in names if n not in touched])  # a delete
        (folder.root / gone).unlink()
        names.remove(gone)
        reads.clear()
        report = _index(folder, index_dir, embedding_cache_path)
        assert sorted(reads) == sorted(touched) and report.removed == 1
    assert layout.read_manifest(index_dir).last_merge is not None  # signatures went through merges
    fresh = tmp_path / "fresh"
    index_paths([folder.root], fresh, CONFIG, progress=False, cache_path=embedding_cache_path)
    expected = _runs(fresh)
    _assert_same(_runs(index_dir), expected)
    optimize(index_dir)
    reads.clear()
    assert not _index(folder, index_dir, embedding_cache_path).committed and reads == []
    _assert_same(_runs(index_dir), expected)
