"""One id, one document, on every write path; repair of an index that holds an id twice; readers
that never give up on a healthy index during a stream of commits; fair writer locks with true
messages; the write path's process-wide caches under thread switches (issue 28). Each test here
reproduces a failure of main 0668538."""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import pytest
from test_segments import CONFIG, SOURCE, _memory, _text

from hybridlab.index import reader
from hybridlab.index.admin.verify import repair, verify
from hybridlab.index.format import layout
from hybridlab.index.format.caches import WRITE_CACHES
from hybridlab.index.format.lru import LruCache
from hybridlab.index.write import build
from hybridlab.index.write.build import apply_changes, last_versions
from hybridlab.index.write.memory import MemoryWriter
from hybridlab.search.engine import open_index


def _base(tmp_path, embedding_cache_path, n: int = 8):
    rng = random.Random(3)
    documents = [_memory(f"m{i:03d}", _text(rng), 1 + i % 27, ()) for i in range(n)]
    index_dir = tmp_path / "index"
    apply_changes(
        index_dir, [(SOURCE, documents, False)], CONFIG, progress=False, cache_path=embedding_cache_path
    )
    return index_dir


def _versions(index_dir, doc_id: str) -> list[str]:
    """The texts the index holds for `doc_id` (exactly one when one id is one document)."""
    with open_index(index_dir) as index:
        return [
            row[0]
            for row in index.snapshot().generation.store.fetchall(
                "SELECT text FROM documents WHERE doc_id = ?", [doc_id]
            )
        ]


def test_last_versions_keeps_the_last_document_of_an_id_per_source():
    a1, a2, b = _memory("a", "one", 1, ()), _memory("a", "two", 2, ()), _memory("b", "bee", 3, ())
    batches = [(SOURCE, [a1, b], False), (SOURCE, [a2], False), ("other", [a1], False)]
    assert last_versions(batches) == [(SOURCE, [b], False), (SOURCE, [a2], False), ("other", [a1], False)]
    assert last_versions(batches[:1]) == batches[:1]  # nothing twice: the batches as they are


def test_the_same_id_twice_in_one_write_keeps_the_last_version(tmp_path, embedding_cache_path):
    index_dir = _base(tmp_path, embedding_cache_path)
    report = apply_changes(
        index_dir,
        [(SOURCE, [_memory("dup", "version one", 4, ()), _memory("dup", "version two", 5, ())], False)],
        progress=False,
        cache_path=embedding_cache_path,
    )
    assert (report.added, report.documents) == (1, 1)
    assert _versions(index_dir, "dup") == ["version two"]
    assert verify(index_dir) == []


def test_a_deferred_commit_of_one_id_twice_keeps_the_last_version(tmp_path, embedding_cache_path):
    index_dir = _base(tmp_path, embedding_cache_path)
    writer = MemoryWriter(index_dir, commit_delay=1.0)
    writer.store_document(_memory("dup", "version one", 4, ()))
    writer.store_document(_memory("dup", "version two", 5, ()))
    writer.flush()
    assert _versions(index_dir, "dup") == ["version two"]
    assert verify(index_dir) == []


def _group_commit(writer: MemoryWriter, documents) -> None:
    """Store `documents` from one thread each while the writer is busy, so that they are committed
    together as one group (the first to get the commit lock writes them all)."""
    threads = []
    with writer._commit_lock:  # a write is running
        for document in documents:
            threads.append(threading.Thread(target=writer.store_document, args=(document,)))
            threads[-1].start()
            deadline = time.monotonic() + 10
            while writer.pending < len(threads) and time.monotonic() < deadline:
                time.sleep(0.001)
        assert writer.pending == len(documents)
    for thread in threads:
        thread.join()


def test_a_group_commit_replacing_one_id_twice_during_a_fold_keeps_the_last_version(
    tmp_path, embedding_cache_path
):
    index_dir = _base(tmp_path, embedding_cache_path)
    writer = MemoryWriter(index_dir, wal_records=2)
    writer.store_document(_memory("dup", "version zero", 3, ()))  # in the log
    _group_commit(
        writer,
        [
            _memory("fill", "fills the log", 3, ()),
            _memory("dup", "version one", 4, ()),
            _memory("dup", "version two", 5, ()),
        ],
    )
    assert _versions(index_dir, "dup") == ["version two"]
    writer.store_document(_memory("more", "after the fold", 6, ()))
    writer.store_document(_memory("more2", "folds again", 6, ()))
    assert _versions(index_dir, "dup") == ["version two"]
    assert verify(index_dir) == []


def test_a_second_writer_appending_an_id_the_first_appended_replaces_it(tmp_path, embedding_cache_path):
    """Two writers on one index (two MCP server processes on one folder): B's open log must see A's append."""
    index_dir = _base(tmp_path, embedding_cache_path)
    first, second = MemoryWriter(index_dir, wal_records=64), MemoryWriter(index_dir, wal_records=64)
    second.store_document(_memory("b-own", "the second writer's own memory", 3, ()))  # B opens the log
    first.store_document(_memory("shared", "written by the first writer", 4, ()))  # A appends X
    second.store_document(_memory("shared", "replaced by the second writer", 5, ()))  # B stores X again
    assert _versions(index_dir, "shared") == ["replaced by the second writer"]
    assert verify(index_dir) == []
    first.store_document(_memory("a-more", "the first writer again", 6, ()))
    build.fold_log(index_dir)
    assert _versions(index_dir, "shared") == ["replaced by the second writer"]
    assert verify(index_dir) == []


def test_a_log_holding_one_id_twice_reads_and_folds_as_its_last_version(tmp_path, embedding_cache_path):
    """A log written before the writers checked each other's appends: still one document per id."""
    from hybridlab.index.format import wal

    index_dir = _base(tmp_path, embedding_cache_path)
    MemoryWriter(index_dir, wal_records=64).store_document(_memory("seed", "opens the log", 3, ()))
    manifest = layout.read_manifest(index_dir)
    records = wal.read_wal(wal.wal_path(index_dir, manifest.generation)).records
    vectors = records[0].vectors
    writer = wal.WalWriter(wal.wal_path(index_dir, manifest.generation))
    writer.append(
        [
            wal.WalRecord(_memory("twice", "first", 4, ()), vectors),
            wal.WalRecord(_memory("twice", "second", 5, ()), vectors),
        ]
    )
    writer.close()
    assert _versions(index_dir, "twice") == ["second"]
    build.fold_log(index_dir)
    assert _versions(index_dir, "twice") == ["second"]
    assert verify(index_dir) == []


def test_repair_keeps_the_newest_version_of_an_id_written_twice_by_older_code(
    tmp_path, embedding_cache_path, monkeypatch
):
    index_dir = _base(tmp_path, embedding_cache_path)
    before = _versions(index_dir, "m003")
    with monkeypatch.context() as patched:  # yesterday's write path: both copies inserted
        patched.setattr(build, "last_versions", lambda batches: list(batches))
        apply_changes(
            index_dir,
            [(SOURCE, [_memory("dup", "version one", 4, ()), _memory("dup", "version two", 5, ())], False)],
            progress=False,
            cache_path=embedding_cache_path,
        )
        apply_changes(
            index_dir,
            [(SOURCE, [_memory("m003", "m003 rewritten", 6, ())], False)],
            progress=False,
            cache_path=embedding_cache_path,
        )
    with pytest.raises(layout.CorruptIndexError, match="overlap in chunk ids"):
        open_index(index_dir)
    assert verify(index_dir)
    actions = repair(index_dir)
    assert actions and verify(index_dir) == []
    assert _versions(index_dir, "dup") == ["version two"]
    assert _versions(index_dir, "m003") == ["m003 rewritten"] != before
    with open_index(index_dir) as index:
        assert len(set(index.snapshot().generation.doc_ids)) == 9  # the 8 and "dup"


def test_verify_finds_an_id_live_in_two_segments_and_repair_keeps_the_newest(
    tmp_path, embedding_cache_path, monkeypatch
):
    index_dir = _base(tmp_path, embedding_cache_path)
    with monkeypatch.context() as patched:  # a write that did not tombstone the older copy
        patched.setattr(build, "existing_documents", lambda *args: {})
        apply_changes(
            index_dir,
            [(SOURCE, [_memory("m002", "a second copy of m002", 6, ())], False)],
            progress=False,
            cache_path=embedding_cache_path,
        )
    problems = verify(index_dir)
    assert problems and "'m002' (2 versions)" in problems[0]
    repair(index_dir)
    assert verify(index_dir) == []
    assert _versions(index_dir, "m002") == ["a second copy of m002"]


def test_a_slowed_reader_never_gives_up_during_100_commits(tmp_path, embedding_cache_path, monkeypatch):
    """Opening takes longer than two commits (0.1 s added before `_combine`): the reader holds the
    generation it opens, so no commit pulls its files away and no false CorruptIndexError is raised."""
    index_dir = _base(tmp_path, embedding_cache_path)
    combine = reader._combine

    def slow_combine(*args, **kwargs):
        time.sleep(0.1)
        return combine(*args, **kwargs)

    monkeypatch.setattr(reader, "_combine", slow_combine)
    errors: list[BaseException] = []
    opened = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                generation = reader.read_generation(index_dir)
                opened.append(generation.number)
                generation.store.close()
            except BaseException as error:  # noqa: BLE001 - counted
                errors.append(error)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for thread in readers:
        thread.start()
    writer = MemoryWriter(index_dir, wal_records=0)
    try:
        for i in range(100):
            writer.store_document(_memory(f"s{i:03d}", f"stream memory number {i} zq{i}x", 1 + i % 27, ()))
    finally:
        done.set()
        for thread in readers:
            thread.join()
    assert errors == []
    assert len(opened) >= 10 and len(set(opened)) >= 3
    assert verify(index_dir) == []


def test_eight_writers_in_one_process_store_400_memories_without_a_lock_error(tmp_path, embedding_cache_path):
    index_dir = _base(tmp_path, embedding_cache_path)
    writers = [MemoryWriter(index_dir, wal_records=1) for _ in range(8)]
    errors: list[BaseException] = []
    stored: list[str] = []

    def work(writer: MemoryWriter, w: int) -> None:
        for i in range(50):
            try:
                stored.append(writer.store(f"writer {w} memory {i} token zw{w}n{i}").id)
            except BaseException as error:  # noqa: BLE001 - counted
                errors.append(error)

    threads = [threading.Thread(target=work, args=(writer, w)) for w, writer in enumerate(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(stored) == 400
    with open_index(index_dir) as index:
        assert set(stored) <= set(index.snapshot().generation.doc_ids)
    assert verify(index_dir) == []


def test_two_threads_writing_one_index_queue_instead_of_failing(tmp_path, embedding_cache_path):
    index_dir = _base(tmp_path, embedding_cache_path)
    errors: list[BaseException] = []

    def write(t: int) -> None:
        for i in range(5):
            try:
                apply_changes(
                    index_dir,
                    [(SOURCE, [_memory(f"t{t}-{i}", f"thread {t} write {i}", 2, ())], False)],
                    progress=False,
                    cache_path=embedding_cache_path,
                )
            except BaseException as error:  # noqa: BLE001 - counted
                errors.append(error)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert verify(index_dir) == []


def test_lock_messages_say_who_holds_the_lock(tmp_path):
    index_dir = tmp_path / "index"
    index_dir.mkdir()
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with layout.WriterLock(index_dir):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold, name="the-holder")
    holder.start()
    held.wait(10)
    try:
        started = time.monotonic()
        with pytest.raises(
            layout.IndexLockedError,
            match=rf"locked by PID {os.getpid()} \(this process: "
            r"thread 'the-holder'",
        ):
            layout.WriterLock(index_dir, timeout=0.3).__enter__()
        assert 0.25 < time.monotonic() - started < 5  # it waited, without failing at once
    finally:
        release.set()
        holder.join()
    with layout.WriterLock(index_dir), pytest.raises(layout.IndexLockedError, match="this thread"):
        layout.WriterLock(index_dir, timeout=5).__enter__()  # never waits for itself


def test_a_waiting_writer_gets_the_lock_when_another_process_lets_go(tmp_path):
    """The file lock is waited for by blocking (woken when the holder lets go), with a timeout that
    names the other process."""
    import subprocess

    index_dir = tmp_path / "index"
    index_dir.mkdir()
    code = (
        "import sys, time; from hybridlab.index.format.layout import WriterLock\n"
        "with WriterLock(sys.argv[1]):\n    print('held', flush=True); time.sleep(float(sys.argv[2]))\n"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code, str(index_dir), "1.5"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout.readline().strip() == "held"
        with pytest.raises(layout.IndexLockedError, match=rf"locked by PID {other.pid} \(another process"):
            layout.WriterLock(index_dir, timeout=0.2).__enter__()
        started = time.monotonic()
        with layout.WriterLock(index_dir, timeout=30):
            waited = time.monotonic() - started
        assert waited < 5
    finally:
        other.wait(timeout=30)
        other.stdout.close()


def test_the_write_path_caches_hold_under_constant_thread_switches():
    """The process-wide caches of the write path are LRU objects with one lock: 8 threads evicting
    and reading them with a thread switch every microsecond raise nothing and keep the bound."""
    caches = WRITE_CACHES
    assert all(
        isinstance(cache, LruCache)
        for cache in (
            caches.dense,
            caches.dead,
            caches.small_documents,
            caches.signatures,
            caches.uncommitted_documents,
        )
    )
    cache: LruCache[tuple[int, int], int] = LruCache(16)
    errors: list[BaseException] = []

    def churn(t: int) -> None:
        try:
            for i in range(5000):
                cache.put((t, i), i)
                cache.get((t, i - 3))
                cache.get_or_compute((t, -i), lambda i=i: i)
                if i % 50 == 0:
                    cache.pop((t, i - 1))
        except BaseException as error:  # noqa: BLE001 - counted
            errors.append(error)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=churn, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == [] and len(cache) <= 16


def test_writer_threads_storing_updating_and_folding_while_others_search(tmp_path, embedding_cache_path):
    """Threads of one process store, replace and fold while others search (issue 29 item 2): nothing
    lost, no exception, each replaced id one document holding its last version, and every search
    equal to the same search run single-threaded afterwards on the generation it answered from."""
    from datetime import UTC, datetime

    from hybridlab.search.filters import Filters
    from hybridlab.search.pipeline import first_stage, records

    index_dir = _base(tmp_path, embedding_cache_path, n=30)
    now = datetime(2026, 11, 1, tzinfo=UTC)
    errors: list[BaseException] = []
    stored: dict[str, str] = {}
    searched: list[tuple] = []
    writing = threading.Event()
    writing.set()

    def ranked(index, snapshot, query: str) -> list[tuple[str, float]]:
        asked = records.Search(query, {"limit": 10}, Filters(), None, now, index.config_file)
        retrieval = first_stage.retrieve(snapshot, asked, index.query_models)
        doc_ids = snapshot.generation.doc_ids
        return [(doc_ids[hit.row], round(float(hit.score), 9)) for hit in retrieval.hits[:10]]

    def store(t: int) -> None:
        writer = MemoryWriter(index_dir, wal_records=4)
        for i in range(12):
            try:
                doc_id = f"t{t}-{i % 6}"  # the second round replaces the first
                text = f"thread {t} round {i // 6} memory {i % 6} zk{t}x{i % 6}"
                writer.store_document(_memory(doc_id, text, 1 + i, ()))
                stored[doc_id] = text
            except BaseException as error:  # noqa: BLE001 - counted
                errors.append(error)

    def fold() -> None:
        while writing.is_set():
            try:
                build.fold_log(index_dir)
            except BaseException as error:  # noqa: BLE001 - counted
                errors.append(error)
            time.sleep(0.05)

    def search(s: int) -> None:
        with open_index(index_dir) as index:
            rng = random.Random(s)
            while writing.is_set():
                try:
                    snapshot = index.snapshot()
                    query = f"thread {rng.randrange(3)} memory zk{rng.randrange(3)}x{rng.randrange(6)}"
                    searched.append((snapshot, query, ranked(index, snapshot, query)))
                except BaseException as error:  # noqa: BLE001 - counted
                    errors.append(error)
        checker.append(index)

    checker: list = []
    writers = [threading.Thread(target=store, args=(t,)) for t in range(3)]
    others = [threading.Thread(target=fold)] + [threading.Thread(target=search, args=(s,)) for s in range(2)]
    for thread in writers + others:
        thread.start()
    for thread in writers:
        thread.join()
    writing.clear()
    for thread in others:
        thread.join()
    assert errors == []
    assert len(searched) >= 10 and len({snapshot.number for snapshot, _, _ in searched}) >= 2
    index = checker[0]
    for snapshot, query, found in searched:  # single-threaded now, on the generation each search used
        assert ranked(index, snapshot, query) == found
    for doc_id, text in stored.items():
        assert _versions(index_dir, doc_id) == [text]
    assert verify(index_dir) == []


def test_no_module_of_the_index_layer_keeps_a_cache_of_its_own():
    """Caches of the write path live in `WRITE_CACHES` alone: no module of `hybridlab/index/` holds an
    `LruCache`, a dict/OrderedDict or a `functools` cache at module level (locks, pools and the lock
    registry `layout._PROCESS_LOCKS` are state a process must share, not caches; two memoised
    functions of process constants are too: the installed versions and the stopword lists)."""
    import ast
    from pathlib import Path

    import hybridlab.index as index_package

    shared_state = {
        ("format/layout.py", "_PROCESS_LOCKS"),
        ("format/caches.py", "WRITE_CACHES"),
        ("format/artifacts.py", "_versions"),
        ("format/tokenizer.py", "_stopwords"),
    }
    found = []
    root = Path(index_package.__file__).parent
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                target = ast.unparse(node.targets[0] if isinstance(node, ast.Assign) else node.target)
                value = node.value
                is_cache = (
                    isinstance(value, ast.Dict)
                    and not target.isupper()
                    or (
                        isinstance(value, ast.Call)
                        and ast.unparse(value.func).split(".")[-1]
                        in {"LruCache", "OrderedDict", "dict", "defaultdict", "WeakValueDictionary"}
                    )
                )
                if is_cache and (name, target) not in shared_state:
                    found.append(f"{name}: {target}")
            if isinstance(node, ast.FunctionDef):
                decorators = {ast.unparse(d).split("(")[0].split(".")[-1] for d in node.decorator_list}
                if decorators & {"lru_cache", "cache"} and (name, node.name) not in shared_state:
                    found.append(f"{name}: {node.name} (@{min(decorators & {'lru_cache', 'cache'})})")
    assert found == []
