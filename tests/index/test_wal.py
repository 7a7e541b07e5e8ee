"""The write-ahead log: records round-trip, a torn tail is ignored and cut, memories in the log
answer exactly like the same memories in a segment (and like a fresh build), and every write folds it."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from test_segments import CONFIG, SOURCE, _assert_same, _memory, _runs, _text

from hybridlab.index.admin.verify import repair, verify
from hybridlab.index.format import layout, wal
from hybridlab.index.format.manifest import FORMAT_VERSION, LOG_DELETES_FORMAT
from hybridlab.index.write import build, merge
from hybridlab.index.write.build import apply_changes, fold_log, optimize
from hybridlab.index.write.memory import MemoryWriter
from hybridlab.search.engine import open_index


def _record(doc_id: str, chunks: int = 1) -> wal.WalRecord:
    vectors = np.arange(chunks * 4, dtype=np.float32).reshape(chunks, 4) / 7
    return wal.WalRecord(_memory(doc_id, f"text of {doc_id} é ✓", 3, ("red", "blue")), {"m": vectors})


def test_records_round_trip_and_a_torn_tail_is_ignored_then_cut(tmp_path):
    path = tmp_path / "wal-000001.log"
    writer = wal.WalWriter(path)
    writer.append([_record("a"), _record("b", 2)])
    writer.append([_record("c")])
    writer.close()
    contents = wal.read_wal(path)
    assert [r.document for r in contents.records] == [_record(x).document for x in "abc"]
    assert (
        contents.records[0].document.content_sha256 == _record("a").document.content_sha256
    )  # dates kept exactly
    np.testing.assert_array_equal(contents.records[1].vectors["m"], _record("b", 2).vectors["m"])
    assert contents.problem is None and contents.valid_end == contents.size
    intact = contents.size
    with open(path, "ab") as handle:  # an append cut short by a crash: a header announcing more than follows
        handle.write(wal.encode_record(_record("d"))[:30])
    torn = wal.read_wal(path)
    assert len(torn.records) == 3 and torn.valid_end == intact and "cut short" in torn.problem
    writer = wal.WalWriter(path)  # the next writer cuts the unacknowledged tail before appending
    assert writer.records == 3 and path.stat().st_size == intact
    writer.append([_record("e")])
    writer.close()
    assert [r.document.doc_id for r in wal.read_wal(path).records] == ["a", "b", "c", "e"]
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF  # a flipped byte in the last record: its checksum fails, the records before it stand
    path.write_bytes(bytes(data))
    damaged = wal.read_wal(path)
    assert len(damaged.records) == 3 and "checksum" in damaged.problem


def test_tombstones_round_trip_and_an_ids_last_record_wins(tmp_path):
    """A tombstone is `{"delete": id}`; put, delete, put again: present; put then delete: gone."""
    path = tmp_path / "wal-000001.log"
    writer = wal.WalWriter(path)
    writer.append([_record("a"), _record("b"), wal.tombstone("a"), wal.tombstone("c")])
    assert (writer.doc_ids, writer.deleted) == ({"a", "b", "c"}, {"a", "c"})
    writer.append([_record("a", 2)])
    assert writer.deleted == {"c"} and writer.records == 5
    writer.close()
    contents = wal.read_wal(path)
    assert [(r.doc_id, r.document is None) for r in contents.records] == [
        ("a", False),
        ("b", False),
        ("a", True),
        ("c", True),
        ("a", False),
    ]
    assert [r.doc_id for r in contents.puts] == ["b", "a"] and contents.deleted == {"c"}
    assert len(contents.puts[1].vectors["m"]) == 2  # the last put's version
    assert wal.WalWriter(path).deleted == {"c"}  # read back by the next writer
    assert wal.encode_record(wal.tombstone("c"))[wal.HEADER.size :] == b'{"delete":"c"}'


def _base(tmp_path, embedding_cache_path, rng: random.Random) -> tuple:
    documents = {
        f"m{i:03d}": _memory(
            f"m{i:03d}", _text(rng), rng.randint(1, 28), tuple(rng.sample(["red", "blue"], rng.randint(0, 2)))
        )
        for i in range(12)
    }
    index_dir = tmp_path / "index"
    apply_changes(
        index_dir,
        [(SOURCE, list(documents.values()), False)],
        CONFIG,
        progress=False,
        cache_path=embedding_cache_path,
    )
    return index_dir, documents


@pytest.mark.parametrize("seed", [1, 2])
def test_logged_memories_answer_like_a_fresh_build_before_and_after_the_fold(
    tmp_path, embedding_cache_path, seed
):
    """Memories stored through the log (not folded) give the same bm25, vector, hybrid and filtered
    runs as a fresh build of the same documents; after the fold, staged runs (the corpus graph) too."""
    rng = random.Random(seed)
    index_dir, documents = _base(tmp_path, embedding_cache_path, rng)
    generation = layout.read_manifest(index_dir).generation
    writer = MemoryWriter(index_dir, wal_records=1000)
    for i in range(9):
        document = _memory(
            f"w{i:03d}", _text(rng), rng.randint(1, 28), tuple(rng.sample(["red", "blue"], rng.randint(0, 2)))
        )
        documents[document.doc_id] = document
        stored = writer.store_document(document)
        assert stored.generation == generation
    assert writer.appends == 9 and writer.commits == 0
    assert layout.read_manifest(index_dir).generation == generation  # nothing committed: appended only
    fresh = tmp_path / "fresh"
    apply_changes(
        fresh,
        [(SOURCE, list(documents.values()), False)],
        CONFIG,
        progress=False,
        cache_path=embedding_cache_path,
    )
    expected = _runs(fresh)
    got = _runs(index_dir)
    unstaged = lambda runs: {key: run for key, run in runs.items() if key[1] != "staged"}
    # staged runs differ only in reach: logged rows are in no neighbour list until the fold
    _assert_same(unstaged(got), unstaged(expected))
    assert verify(index_dir) == []
    with open_index(index_dir) as index:
        assert index.stats().write_ahead_log.memories == 9
        assert index.n_chunks == len(documents)
    report = fold_log(index_dir)
    assert report.committed and report.embedded == 0  # the log's vectors are reused, not re-embedded
    assert not wal.wal_path(index_dir, report.generation).exists()
    _assert_same(_runs(index_dir), expected)
    optimize(index_dir)
    _assert_same(_runs(index_dir), expected)


def test_the_writer_folds_a_full_log_and_a_reader_sees_each_store_at_once(tmp_path, embedding_cache_path):
    index_dir, _ = _base(tmp_path, embedding_cache_path, random.Random(5))
    writer = MemoryWriter(index_dir, wal_records=4)
    with open_index(index_dir) as index:
        stored = []
        for i in range(10):
            stored.append(writer.store(f"zq{i}word memory number {i}", ["red"]))
            # no explicit refresh: the next search stats the log and sees the memory
            assert index.search(f"zq{i}word", mode="bm25", limit=1)[0].doc_id == stored[-1].id
        assert writer.folds == 2 and writer.appends == 10
        assert index.stats().write_ahead_log.memories == 2
        assert {s.id for s in stored} <= set(index.snapshot().generation.doc_ids)
    names = sorted(p.name for p in index_dir.iterdir() if p.name.startswith("wal-"))
    assert len(names) == 2  # the live generation's log and the previous one's (the repair fallback)
    assert verify(index_dir) == []


def test_an_index_write_folds_the_log_and_a_stored_id_again_replaces_it(tmp_path, embedding_cache_path):
    index_dir, documents = _base(tmp_path, embedding_cache_path, random.Random(9))
    writer = MemoryWriter(index_dir, wal_records=100)
    writer.store_document(_memory("w1", "okapi enclosure", 4, ("red",)))
    writer.store_document(_memory("w2", "okapi feeding", 4, ()))
    # the same id again: a replacement, appended too (the log's last version counts), never a duplicate
    replaced = writer.store_document(_memory("w1", "giraffe enclosure", 5, ("blue",)))
    assert (writer.commits, writer.appends, replaced.generation) == (0, 3, 1)
    with open_index(index_dir) as index:
        assert index.get_document("w1").text == "giraffe enclosure"
        assert index.stats().write_ahead_log.memories == 2
    report = apply_changes(
        index_dir,
        [(SOURCE, [_memory("x1", "zebra crossing", 6, ())], False)],
        progress=False,
        cache_path=embedding_cache_path,
    )
    assert report.embedded == 1  # only the new document: logged vectors are reused
    with open_index(index_dir) as index:
        doc_ids = list(index.snapshot().generation.doc_ids)
        assert sorted(doc_ids) == sorted([*documents, "w1", "w2", "x1"])
        assert index.get_document("w1").text == "giraffe enclosure"
        assert index.stats().write_ahead_log.memories == 0


def test_verify_reports_a_torn_log_and_repair_cuts_it(tmp_path, embedding_cache_path):
    index_dir, _ = _base(tmp_path, embedding_cache_path, random.Random(11))
    writer = MemoryWriter(index_dir, wal_records=100)
    kept = writer.store("a memory that was acknowledged", ["red"])
    writer.close()
    path = wal.wal_path(index_dir, kept.generation)
    with open(path, "ab") as handle:
        handle.write(b"\x10\x00")
    problems = verify(index_dir)
    assert len(problems) == 1 and path.name in problems[0] and "cut short" in problems[0]
    with open_index(index_dir) as index:  # a reader stops before the torn record: still searchable
        assert index.get_document(kept.id).text == "a memory that was acknowledged"
    actions = repair(index_dir)
    assert any("write-ahead log" in action for action in actions)
    assert verify(index_dir) == []


def test_fold_records_setting(monkeypatch):
    monkeypatch.setenv("HYBRIDLAB_WAL_RECORDS", "0")
    assert (
        MemoryWriter(
            "unused",
        ).wal_records
        == 0
    )
    monkeypatch.setenv("HYBRIDLAB_WAL_RECORDS", "many")
    with pytest.raises(ValueError, match="HYBRIDLAB_WAL_RECORDS"):
        wal.fold_records()
    assert build.fold_log("no-such-index") is None


@pytest.mark.parametrize("seed", [3, 4])
def test_random_stores_replacements_deletes_and_folds_answer_like_a_fresh_build(
    tmp_path, embedding_cache_path, monkeypatch, seed
):
    """A random sequence of logged stores, replacements and deletes (tombstones) of logged and
    segment documents, deletes by a write removing documents, and folds, with merges: bm25, vector,
    hybrid and filtered runs equal a fresh build's at the end, and after `optimize` (log folded)
    staged runs too."""
    monkeypatch.setattr(merge, "MERGE_FACTOR", 3)
    rng = random.Random(seed)
    index_dir, documents = _base(tmp_path, embedding_cache_path, rng)
    writer = MemoryWriter(index_dir, wal_records=5)
    counter = 0
    for _ in range(30):
        operation = rng.choice(["store", "store", "store", "replace", "tombstone", "delete", "fold"])
        if operation == "store":
            counter += 1
            document = _memory(
                f"s{counter:03d}", _text(rng), rng.randint(1, 28), tuple(rng.sample(["red", "blue"], 1))
            )
            writer.store_document(document)
        elif operation == "replace":
            doc_id = rng.choice(sorted(documents))
            document = _memory(doc_id, _text(rng), rng.randint(1, 28), ("red",))
            writer.store_document(document)
        elif operation == "tombstone" and len(documents) > 2:
            doc_id = rng.choice(sorted(documents))
            assert writer.delete([doc_id]).removed == 1
            del documents[doc_id]
            continue
        elif operation == "delete" and len(documents) > 2:
            del documents[rng.choice(sorted(documents))]
            apply_changes(
                index_dir,
                [(SOURCE, list(documents.values()), True)],
                progress=False,
                cache_path=embedding_cache_path,
            )
            continue
        else:
            fold_log(index_dir)
            continue
        documents[document.doc_id] = document
    assert writer.appends >= 5 and writer.commits == 0  # stores, replacements and tombstones: all appended
    fresh = tmp_path / "fresh"
    apply_changes(
        fresh,
        [(SOURCE, list(documents.values()), False)],
        CONFIG,
        progress=False,
        cache_path=embedding_cache_path,
    )
    expected = _runs(fresh)
    unstaged = lambda runs: {key: run for key, run in runs.items() if key[1] != "staged"}
    _assert_same(unstaged(_runs(index_dir)), unstaged(expected))
    assert verify(index_dir) == []
    optimize(index_dir)
    _assert_same(_runs(index_dir), expected)


def test_result_details_are_read_once_per_segment_and_kept_across_refreshes(tmp_path, embedding_cache_path):
    """A search's texts, tags and dates come from per-segment details read on first need: a refresh
    after a store reads only the log's (in memory), not every chunk's text again."""
    index_dir, documents = _base(tmp_path, embedding_cache_path, random.Random(13))
    writer = MemoryWriter(index_dir, wal_records=100)
    with open_index(index_dir) as index:
        first = index.search("panel widget", limit=5)
        segment = index.snapshot().generation.segments[0]
        kept = segment.details["rows"]
        stored = writer.store("zqdetails a memory with its own words", ["blue"])
        hit = index.search("zqdetails", mode="bm25", limit=1)[0]
        generation = index.snapshot().generation
        assert generation.segments[0] is segment and segment.details["rows"] is kept
        assert hit.doc_id == stored.id and "zqdetails" in hit.snippet and tuple(hit.tags) == ("blue",)
        for result in [
            *first,
            *index.search("panel widget", limit=5),
        ]:  # each row's own text, before and after
            assert result.snippet.strip("…").strip()[:20] in documents[result.doc_id].text


def test_tombstones_and_replacements_in_the_log_verify_clean_and_survive_the_repair_fallback(
    tmp_path, embedding_cache_path
):
    """A log holding tombstones (of a segment's and a logged memory) and a replacement verifies
    clean; when the fold's new store is damaged, `--repair` falls back to the previous generation,
    whose log (kept beside it) still deletes and replaces."""
    from hybridlab.index.format import store

    index_dir, documents = _base(tmp_path, embedding_cache_path, random.Random(17))
    writer = MemoryWriter(index_dir, wal_records=100)
    kept = writer.store("zqkept a memory that stays", ["red"])
    gone = writer.store("zqgone a memory deleted from the log", ["red"])
    writer.store_document(_memory("m000", "zqnew the replaced memory", 4, ("blue",)))
    assert writer.delete(["m001", gone.id]).removed == 2 and writer.appends == 4
    assert verify(index_dir) == []

    def check() -> None:
        with open_index(index_dir) as index:
            assert sorted(index.snapshot().generation.doc_ids) == sorted({*documents, kept.id} - {"m001"})
            assert index.get_document("m000").text == "zqnew the replaced memory"
            assert [r.doc_id for r in index.search("zqgone zqkept", mode="bm25", limit=5)] == [kept.id]

    check()
    logged_generation = layout.read_manifest(index_dir).generation
    assert fold_log(index_dir).committed
    check()
    manifest = layout.read_manifest(index_dir)
    base = layout.file_base(index_dir, manifest)
    name = next(
        name
        for name in manifest.files
        if name.startswith(manifest.segments[-1].name) and Path(name).name in store.STORE_FILES
    )
    (base / name).write_bytes(b"\0" * (base / name).stat().st_size)  # the fold's new store damaged
    assert verify(index_dir)
    actions = repair(index_dir)
    assert any("intact generation" in action for action in actions), actions
    assert layout.read_manifest(index_dir).generation == logged_generation and verify(index_dir) == []
    check()


def test_a_format_4_index_is_committed_to_before_the_first_logged_delete(tmp_path, embedding_cache_path):
    """Code that reads only puts would cut a log at its first delete record: the writer appends to no
    log of a format-4 manifest; its first write commits (a format-5 manifest), later ones append."""
    index_dir, documents = _base(tmp_path, embedding_cache_path, random.Random(3))
    manifest = layout.read_manifest(index_dir)
    assert manifest.format == FORMAT_VERSION == LOG_DELETES_FORMAT
    path = index_dir / layout.MANIFEST
    path.write_text(path.read_text().replace('"format": 5', '"format": 4'))
    assert layout.read_manifest(index_dir).format == 4
    writer = MemoryWriter(index_dir, wal_records=100)
    first, second = sorted(documents)[:2]
    assert writer.delete([first]).removed == 1
    assert (writer.commits, writer.appends) == (1, 0)
    assert layout.read_manifest(index_dir).format == 5
    assert writer.delete([second]).removed == 1
    assert (writer.commits, writer.appends) == (1, 1)
    with open_index(index_dir) as index:
        assert not {first, second} & set(index.snapshot().generation.doc_ids)
