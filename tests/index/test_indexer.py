"""Indexing: incremental updates embed only new chunk texts; failed runs leave the old index intact."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hybridlab.config import ChunkConfig, IndexConfig
from hybridlab.index.format import artifacts, faults, layout
from hybridlab.index.write.build import IndexReport, index_paths
from hybridlab.search.engine import open_index


def section(title: str, word: str, level: int = 2) -> str:
    """A section well above min_chunk_size (200 chars): its own chunk."""
    return f"{'#' * level} {title}\n\n" + " ".join([word] * 40) + "\n\n"


def write_docs(folder: Path, docs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in docs.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


# a: 1 chunk, b: 2 chunks, c: 1 chunk; each word names the chunk it sits in
DOCS = {
    "a.md": section("Alpha", "aardvark", 1),
    "b.md": section("Bravo", "bison", 1) + section("Second", "buffalo"),
    "c.md": section("Charlie", "caribou", 1),
}


def top_doc_ids(index_dir: Path, query: str, **options) -> list[str]:
    with open_index(index_dir) as index:
        return [r.doc_id for r in index.search(query, mode="bm25", **options)]


def results(index_dir: Path, query: str) -> list[tuple[str, int, float]]:
    with open_index(index_dir) as index:
        # a fixed `now`: with the wall clock the recency factor drifts between two calls
        return [(r.doc_id, r.chunk_id, r.score) for r in index.search(query, now="2030-01-01")]


def live_generation(index_dir: Path) -> str:
    """The generation the manifest names; also checks no unfinished `gen-*.tmp-*` folder is left."""
    assert not list(index_dir.glob("gen-*.tmp-*"))
    return layout.read_manifest(index_dir).path


def counts(report: IndexReport) -> dict[str, int]:
    return {
        k: getattr(report, k)
        for k in (
            "documents",
            "added",
            "changed",
            "removed",
            "unchanged",
            "chunks",
            "new_chunks",
            "embedded",
            "cache_hits",
        )
    }


def test_incremental_reindex_updates_only_what_changed(tmp_path):
    source = write_docs(tmp_path / "docs", DOCS)
    index_dir = tmp_path / "index"

    first = index_paths([source], index_dir, progress=False)
    assert counts(first) == {
        "documents": 3,
        "added": 3,
        "changed": 0,
        "removed": 0,
        "unchanged": 0,
        "chunks": 4,
        "new_chunks": 4,
        "embedded": 4,
        "cache_hits": 0,
    }
    assert first.committed and first.generation == 1
    assert top_doc_ids(index_dir, "caribou") == ["c.md"]

    again = index_paths([source], index_dir, progress=False)
    assert counts(again) == {
        "documents": 3,
        "added": 0,
        "changed": 0,
        "removed": 0,
        "unchanged": 3,
        "chunks": 4,
        "new_chunks": 0,
        "embedded": 0,
        "cache_hits": 0,
    }
    assert not again.committed and again.generation == 1
    assert "no change (index untouched)" in again.summary()

    # b: second section rewritten (first kept); c removed; d added
    (source / "b.md").write_text(section("Bravo", "bison", 1) + section("Second", "bonobo"))
    (source / "c.md").unlink()
    (source / "d.md").write_text(section("Delta", "dingo", 1))
    update = index_paths([source], index_dir, progress=False)
    # new chunks: b's two + d's one; embedded: only b's new section and d (b's first is cached)
    assert counts(update) == {
        "documents": 3,
        "added": 1,
        "changed": 1,
        "removed": 1,
        "unchanged": 1,
        "chunks": 4,
        "new_chunks": 3,
        "embedded": 2,
        "cache_hits": 2,
    }
    assert update.committed and update.generation == 2
    assert top_doc_ids(index_dir, "dingo") == ["d.md"]
    assert top_doc_ids(index_dir, "bonobo") == ["b.md"]
    assert top_doc_ids(index_dir, "caribou") == []
    assert top_doc_ids(index_dir, "buffalo") == []
    assert live_generation(index_dir) == "gen-000002"
    with open_index(index_dir) as index:
        assert index.consistency_problems() == []
        assert index.stats().documents == 3


def test_touching_a_file_updates_it_without_embedding(tmp_path):
    source = write_docs(tmp_path / "docs", DOCS)
    index_dir = tmp_path / "index"
    index_paths([source], index_dir, progress=False)
    os.utime(source / "a.md", (1_700_000_000, 1_700_000_000))  # new mtime = new updated_at
    report = index_paths([source], index_dir, progress=False)
    assert (report.changed, report.unchanged, report.new_chunks, report.embedded) == (1, 2, 1, 0)
    with open_index(index_dir) as index:
        assert index.get_document("a.md").updated_at.startswith("2023-11-14T22:13:20")


def test_changed_chunking_rechunks_but_embeds_only_new_texts(tmp_path):
    source = write_docs(tmp_path / "docs", DOCS)
    index_dir = tmp_path / "index"
    index_paths([source], index_dir, progress=False)
    # header_levels=(1,) folds b's "## Second" into its H1 chunk: one new text; a and c unchanged
    report = index_paths(
        [source], index_dir, IndexConfig(chunk=ChunkConfig(header_levels=(1,))), progress=False
    )
    assert (report.unchanged, report.chunks, report.new_chunks, report.embedded) == (3, 3, 3, 1)
    assert report.committed


def test_memories_update_in_place(tmp_path, tiny_corpus, embedding_cache_path):
    path = tmp_path / "memories.jsonl"
    shutil.copy(tiny_corpus / "memories.jsonl", path)
    index_dir = tmp_path / "index"
    index_paths([path], index_dir, progress=False, cache_path=embedding_cache_path)
    lines = path.read_text().splitlines()
    m2 = json.loads(lines[1])
    m2["tags"] = ["ops", "tls", "certificates"]
    path.write_text("\n".join([lines[0], json.dumps(m2)]) + "\n")
    report = index_paths([path], index_dir, progress=False, cache_path=embedding_cache_path)
    # tags are a line of the indexed text (ChunkConfig.index_tags): new tags, one new text to embed
    assert (report.changed, report.removed, report.unchanged, report.embedded) == (1, 1, 1, 1)
    with open_index(index_dir) as index:
        assert [r.doc_id for r in index.search_by_tag(["certificates"])] == ["m2"]


def test_tags_are_a_line_of_the_indexed_text_and_old_configs_keep_theirs():
    from hybridlab.index.format.rows import indexed_text
    from hybridlab.ingest.chunking import embedding_text, single_chunk
    from hybridlab.ingest.sources import memory_document

    memory = memory_document(
        {
            "id": "m",
            "content": "Pins Terraform 1.5.7.",
            "tags": ["terrabase", "Toolchain"],
            "created_at": "2024-01-01T00:00:00Z",
        },
        "memories.jsonl:1",
        "memories.jsonl",
    )
    chunk = single_chunk(memory.text)[0]
    assert indexed_text(chunk, memory, ChunkConfig()) == "Tags: terrabase, toolchain\nPins Terraform 1.5.7."
    assert indexed_text(chunk, memory, ChunkConfig(index_tags=False)) == "Pins Terraform 1.5.7."
    assert embedding_text(single_chunk("body", section="A > B")[0], "", ("x",)) == "A > B\nTags: x\nbody"
    # a manifest (or exported config) written before the setting existed was built without tags
    stored = IndexConfig(chunk=ChunkConfig(index_tags=False)).to_dict()
    del stored["chunk"]["index_tags"]
    assert IndexConfig.from_manifest(stored).chunk.index_tags is False
    assert IndexConfig.from_dict({}).chunk.index_tags is True


def test_same_doc_id_from_two_sources_is_an_error(tmp_path):
    one = write_docs(tmp_path / "one", {"a.md": DOCS["a.md"]})
    two = write_docs(tmp_path / "two", {"a.md": DOCS["a.md"]})
    with pytest.raises(ValueError, match="document id 'a.md' comes from two sources"):
        index_paths([one, two], tmp_path / "index", progress=False)


def test_a_second_writer_is_refused(tmp_path):
    source = write_docs(tmp_path / "docs", DOCS)
    with (
        layout.WriterLock(tmp_path / "index"),
        pytest.raises(layout.IndexLockedError, match=f"locked by PID {os.getpid()}"),
    ):
        index_paths([source], tmp_path / "index", progress=False)


def test_report_records_time_and_chunks_per_second():
    report = IndexReport(
        "ix", documents=2, added=2, chunks=10, new_chunks=10, seconds=4.0, committed=True, generation=1
    )
    assert report.chunks_per_second == 2.5
    assert report.to_dict()["chunks_per_second"] == 2.5
    assert report.summary() == (
        "2 documents: 2 added, 0 changed, 0 removed, 0 unchanged; 10 chunks (10 new), 0 embedded, "
        "0 from cache; 0 files skipped; 4.0 s, 2.5 chunks/s; generation 1"
    )


# ------------------------------------------------------------------ failures
@pytest.fixture(scope="module")
def failure_cache(tmp_path_factory) -> Path:
    """An embeddings cache shared by the failure tests, so each base index embeds DOCS once."""
    return tmp_path_factory.mktemp("failure-cache") / "embeddings.duckdb"


@pytest.fixture
def base_index(tmp_path, failure_cache) -> Path:
    """`tmp_path/docs` (DOCS) indexed into `tmp_path/index` (generation 1). The source path is part
    of a document's identity, so each test gets its own rather than a copy of a shared one."""
    source = write_docs(tmp_path / "docs", DOCS)
    index_paths([source], tmp_path / "index", progress=False, cache_path=failure_cache)
    return tmp_path


def new_doc(tag: str) -> str:
    """d.md with a text no other test embeds (so whether it is embedded is known)."""
    return section("Delta", "dingo", 1) + f"written by {tag}\n"


PRE_COMMIT_STAGES = [
    "start",
    "store-copied",
    "store-committed",
    "embedded-batch",
    "bm25-written",
    "faiss-written",
    "generation-flushed",
    "generation-renamed",
]


class Boom(RuntimeError):
    pass


def fail_at(stage: str, error: BaseException):
    seen = []

    def hook(name: str) -> None:
        seen.append(name)
        if name == stage:
            raise error

    return hook, seen


@pytest.mark.parametrize("stage", PRE_COMMIT_STAGES)
def test_failed_run_leaves_the_previous_index_intact(base_index, failure_cache, monkeypatch, stage):
    root = base_index
    source, index_dir = root / "docs", root / "index"
    before = results(index_dir, "caribou aardvark")
    manifest = (index_dir / layout.MANIFEST).read_text()
    (source / "d.md").write_text(new_doc(f"failure at {stage}"))
    (source / "c.md").unlink()

    hook, seen = fail_at(stage, Boom(stage))
    monkeypatch.setattr(faults, "HOOK", hook)
    with pytest.raises(Boom):
        index_paths([source], index_dir, progress=False, cache_path=failure_cache)
    assert seen[-1] == stage
    monkeypatch.setattr(faults, "HOOK", None)

    assert (index_dir / layout.MANIFEST).read_text() == manifest
    assert results(index_dir, "caribou aardvark") == before
    assert top_doc_ids(index_dir, "dingo") == []
    assert not list(index_dir.glob("gen-*.tmp-*"))

    report = index_paths([source], index_dir, progress=False, cache_path=failure_cache)
    assert (report.added, report.removed, report.unchanged, report.committed) == (1, 1, 2, True)
    # the failed run's embeddings were kept in the cache once it had embedded d (stage 3 on)
    assert report.embedded == (0 if PRE_COMMIT_STAGES.index(stage) >= 3 else 1)
    assert top_doc_ids(index_dir, "dingo") == ["d.md"]
    assert live_generation(index_dir) == f"gen-{report.generation:06d}"


def test_interrupt_keeps_the_previous_index(base_index, failure_cache, monkeypatch):
    root = base_index
    before = results(root / "index", "bison")
    (root / "docs" / "d.md").write_text(new_doc("interrupt"))
    hook, _ = fail_at("faiss-written", KeyboardInterrupt())
    monkeypatch.setattr(faults, "HOOK", hook)
    with pytest.raises(KeyboardInterrupt):
        index_paths([root / "docs"], root / "index", progress=False, cache_path=failure_cache)
    assert results(root / "index", "bison") == before
    monkeypatch.setattr(faults, "HOOK", None)
    assert index_paths([root / "docs"], root / "index", progress=False, cache_path=failure_cache).committed


def test_failure_after_the_manifest_commit_keeps_the_new_generation(base_index, failure_cache, monkeypatch):
    root = base_index
    (root / "docs" / "d.md").write_text(new_doc("late failure"))
    hook, _ = fail_at("manifest-committed", Boom("late"))
    monkeypatch.setattr(faults, "HOOK", hook)
    with pytest.raises(Boom):
        index_paths([root / "docs"], root / "index", progress=False, cache_path=failure_cache)
    assert top_doc_ids(root / "index", "dingo") == ["d.md"]
    monkeypatch.setattr(faults, "HOOK", None)
    report = index_paths([root / "docs"], root / "index", progress=False, cache_path=failure_cache)
    assert not report.committed and report.unchanged == 4


KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    from hybridlab.index.write import build as indexer
    from hybridlab.index.format import faults
    def hook(stage):
        if stage == sys.argv[3]:
            os.kill(os.getpid(), signal.SIGKILL)
    faults.HOOK = hook
    indexer.index_paths([sys.argv[1]], sys.argv[2], progress=False)
""")


def test_killed_process_leaves_the_previous_index_searchable(tmp_path):
    """A SIGKILL after the new generation was renamed into place but before the manifest named it
    (no clean-up ran at all): the old index still opens; the next run completes."""
    stage = "generation-renamed"
    pytest.importorskip("wordllama")
    source = write_docs(tmp_path / "docs", DOCS)
    index_dir = tmp_path / "index"
    config = IndexConfig(models=("wordllama",))
    index_paths([source], index_dir, config, progress=False)
    before = results(index_dir, "buffalo")
    (source / "d.md").write_text(section("Delta", "dingo", 1))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(source), str(index_dir), stage],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -9, done.stderr
    assert list(index_dir.glob("gen-000002*")), "the killed run left its unfinished generation behind"
    assert results(index_dir, "buffalo") == before
    report = index_paths([source], index_dir, progress=False)
    assert report.committed and report.added == 1 and report.embedded == 0  # d was cached before the kill
    assert top_doc_ids(index_dir, "dingo") == ["d.md"]
    # the uncommitted leftover was removed before numbering, so the new generation takes its number
    assert live_generation(index_dir) == "gen-000002"


def test_chunks_carry_doc_id_index_section_and_embedded_text(tiny_index):
    from hybridlab.index.format import store

    generation = tiny_index / layout.read_manifest(tiny_index).path
    con = store.connect(generation / layout.STORE_FILE, read_only=True)
    try:
        rows = con.execute(
            "SELECT chunk_index, section, start_char, embed_text FROM chunks "
            "WHERE doc_id = 'panel/tabulator.md' ORDER BY chunk_index"
        ).fetchall()
        memory = con.execute(
            "SELECT chunk_index, section, chunk_type, embed_text FROM chunks WHERE doc_id = 'm1'"
        ).fetchall()
    finally:
        con.close()
    assert [(r[0], r[1]) for r in rows] == [(0, "Tabulator › Editors"), (1, "Tabulator › Filters")]
    assert rows[1][2] > 0
    assert rows[0][3].startswith("Tabulator › Editors\n# Tabulator\n")
    assert rows[1][3].startswith("Tabulator › Filters\n## Filters\n")
    assert memory == [
        (
            0,
            "",
            "memory",
            "Tags: build, decision\nDecided to pin torch to the CPU build so installs never pull CUDA wheels.",
        )
    ]


def test_dense_search_after_an_update_that_leaves_gaps_in_chunk_ids(tmp_path, embedding_cache_path):
    """Chunk ids of deleted documents are not reused; FAISS subset scoring must go by row, not id
    (it used to call IndexIDMap2.reconstruct_n(0, n), which aborted the process on a missing id)."""
    source = write_docs(tmp_path / "docs", DOCS)
    index_dir = tmp_path / "index"
    index_paths([source], index_dir, progress=False, cache_path=embedding_cache_path)
    (source / "a.md").unlink()  # chunk id 0 goes away
    (source / "d.md").write_text(section("Delta", "dingo", 1))  # gets chunk id 4
    index_paths([source], index_dir, progress=False, cache_path=embedding_cache_path)
    with open_index(index_dir) as index:
        assert list(index.snapshot().generation.chunk_ids) == [1, 2, 3, 4]
        # staged: BM25 picks candidates, their stored vectors are scored exactly (by row)
        hits = index.search("dingo", staged=True, fallback_threshold=0, explain=True)
        assert hits[0].doc_id == "d.md" and hits[0].explain["dense_rank"] == 1
        assert hits[0].explain["dense_score"] > 0.1


def test_batched_inserts_and_streamed_reads_build_the_same_index(tmp_path, embedding_cache_path, monkeypatch):
    """The build inserts `INSERT_BATCH` documents per transaction and streams chunk texts out of
    DuckDB in `READ_BATCH` rows: tiny batches give the same chunks, ids, BM25 rows and vectors."""
    import numpy as np

    source = write_docs(tmp_path / "docs", DOCS)
    index_paths([source], tmp_path / "whole", progress=False, cache_path=embedding_cache_path)
    from hybridlab.index.format import rows

    monkeypatch.setattr(rows, "INSERT_BATCH", 1)
    monkeypatch.setattr(artifacts, "READ_BATCH", 2)
    index_paths([source], tmp_path / "batched", progress=False, cache_path=embedding_cache_path)
    with open_index(tmp_path / "whole") as whole, open_index(tmp_path / "batched") as batched:
        one, two = whole.snapshot().generation, batched.snapshot().generation
        assert list(one.chunk_ids) == list(two.chunk_ids) == [0, 1, 2, 3]
        assert one.doc_ids == two.doc_ids
        assert one.sparse.vocab == two.sparse.vocab
        model = whole.models[0]
        np.testing.assert_array_equal(whole.dense[model].vectors, batched.dense[model].vectors)
        assert [r.doc_id for r in whole.search("bison", mode="bm25")] == [
            r.doc_id for r in batched.search("bison", mode="bm25")
        ]


def test_writers_get_a_bounded_duckdb_buffer_pool(tmp_path, monkeypatch):
    from hybridlab.index.format import store

    con = store.connect(tmp_path / "w.duckdb")
    assert con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] in {
        "512.0 MiB",
        "488.2 MiB",
    }
    con.close()
    monkeypatch.setenv("HYBRIDLAB_DUCKDB_MEMORY", "512MiB")
    con = store.connect(tmp_path / "w.duckdb")
    assert con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0] == "512.0 MiB"
    con.close()
    monkeypatch.setenv("HYBRIDLAB_DUCKDB_MEMORY", "lots")
    with pytest.raises(ValueError, match="HYBRIDLAB_DUCKDB_MEMORY"):
        store.writer_memory_limit()


def _word_docs(ids, version: int = 0) -> dict[str, str]:
    import random

    words = [
        "otter",
        "heron",
        "maple",
        "granite",
        "comet",
        "violin",
        "saffron",
        "glacier",
        "lantern",
        "harbor",
        "meadow",
        "cobalt",
        "falcon",
        "orchid",
        "tundra",
        "walnut",
        "ember",
        "quartz",
        "willow",
        "canyon",
    ]
    docs = {}
    for i in ids:
        rng = random.Random(i * 31 + version)
        docs[f"doc{i:02d}.md"] = f"# Note {i}\n\n" + " ".join(rng.choice(words) for _ in range(60)) + "\n"
    return docs


def test_a_new_generation_updates_the_corpus_graph_instead_of_rebuilding_it(tmp_path, embedding_cache_path):
    """Re-indexing with a few documents deleted, changed and added updates the previous generation's
    graph (its manifest says so) and gives exactly the graph a full build gives."""
    import numpy as np

    from hybridlab.index.format.graph import build_corpus_graph

    source = write_docs(tmp_path / "docs", _word_docs(range(30)))
    index_dir = tmp_path / "index"
    config = IndexConfig(graph_k=3)
    index_paths([source], index_dir, config, progress=False, cache_path=embedding_cache_path)
    model = layout.read_manifest(index_dir).index_config.models[0]
    assert layout.read_manifest(index_dir).models[model].graph_build == "built"
    (source / "doc03.md").unlink()
    write_docs(source, {**_word_docs([7], version=1), **_word_docs([30, 31])})
    index_paths([source], index_dir, config, progress=False, cache_path=embedding_cache_path)
    assert layout.read_manifest(index_dir).models[model].graph_build == "updated"
    with open_index(index_dir) as index:
        assert index.n_chunks == 31
        expected = build_corpus_graph(index.dense[model].vectors, 3)
        assert np.array_equal(
            np.sort(index.snapshot().generation.graphs[model], axis=1), np.sort(expected, axis=1)
        )

    # an old graph that does not match its checksum is never reused
    graph_path = index_dir / layout.read_manifest(index_dir).path / layout.graph_file(model)
    damaged = np.load(graph_path)[::-1].copy()
    with open(graph_path, "wb") as handle:
        np.save(handle, damaged, allow_pickle=False)
    write_docs(source, _word_docs([32]))
    index_paths([source], index_dir, config, progress=False, cache_path=embedding_cache_path)
    assert layout.read_manifest(index_dir).models[model].graph_build == "built"
    with open_index(index_dir) as index:
        expected = build_corpus_graph(index.dense[model].vectors, 3)
        assert np.array_equal(
            np.sort(index.snapshot().generation.graphs[model], axis=1), np.sort(expected, axis=1)
        )
