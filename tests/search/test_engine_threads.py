"""One `Index` shared by 8 searching threads while another thread commits 20 generations.

Each search reports the generation that answered it; its results must equal, field for field
(chunk ids, scores, explain), those of a single-threaded search of a fresh Index opened on that
generation right after it was committed. Every commit rewrites, deletes and adds notes, so chunk
rows shift between generations: a search that mixed two generations, a cache that leaked across
them or a DuckDB connection used by two threads at once would show as a mismatch or an exception.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from hybridlab.config import IndexConfig

NOW = "2026-11-01T00:00:00Z"
THREADS = 8
SEARCHES = 500
COMMITS = 20
CONFIG = IndexConfig(models=("wordllama",))
SOURCES = ("docs", "memories.jsonl", "beir", "notes.jsonl")
# (query, options): every retriever, fusion, filter, staged and explain path, and queries whose
# answers the commits change
CASES = [
    ("quokka dashboard widgets", {}),
    ("quokka dashboard widgets", {"explain": True, "limit": 5}),
    ("panel tabulator filter", {"staged": True, "fallback_threshold": 1, "candidates": 3, "expand_hops": 2}),
    ("quokka notes panel", {"mode": "bm25", "limit": 20}),
    ("dashboard plots", {"mode": "vector", "limit": 8}),
    ("quokka", {"tags": ["quokka"], "limit": 30}),
    ("widgets and tables", {"collection": "memories", "limit": 10}),
    ("panel widgets for the quokka", {"fusion": "rrf", "since": "2026-10-05", "explain": True}),
    ("decision about storage", {"tags": ["quokka", "decision"], "tags_any": True, "limit": 30}),
    ("certificate renewal", {"chunk_types": ["memory"], "explain": True}),
]
RUN_CASE = ("quokka dashboard widgets", {"limit": 30})


def write_notes(corpus: Path, commit: int) -> None:
    """Notes q(commit-4)..q(commit), each reworded at every commit: the oldest one is deleted, one
    is added, the others change (new chunks, so later rows shift)."""
    rows = [
        {
            "id": f"q{j}",
            "content": f"Note {j}, revision {commit}: the quokka dashboard uses panel widgets "
            f"and {'tables' if (j + commit) % 2 else 'plots'}.",
            "tags": ["quokka", f"n{j % 3}"],
            "created_at": f"2026-10-{j + 1:02d}T08:00:00Z",
        }
        for j in range(max(0, commit - 4), commit + 1)
    ]
    (corpus / "notes.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def commit(corpus: Path, index_dir: Path, cache: Path, number: int) -> int:
    from hybridlab.index.write.build import index_paths

    write_notes(corpus, number)
    report = index_paths(
        [corpus / name for name in SOURCES], index_dir, CONFIG, progress=False, cache_path=cache
    )
    assert report.committed
    return report.generation


def answer(index, case: int) -> tuple[int, object]:
    """(generation, payload) of one case: search results as dicts, or the evaluation run."""
    if case == len(CASES):
        query, options = RUN_CASE
        response = index.run_response(query, now=NOW, **options)
        return response.generation, response.run
    query, options = CASES[case]
    response = index.search_response(query, now=NOW, **options)
    return response.generation, [result.to_dict() for result in response.results]


def reference(index_dir: Path) -> tuple[int, list[object]]:
    """Every case answered single-threaded by a fresh Index of the live generation."""
    from hybridlab.search.engine import open_index

    with open_index(index_dir) as fresh:
        answers = [answer(fresh, case) for case in range(len(CASES) + 1)]
    generations = {generation for generation, _ in answers}
    assert len(generations) == 1
    return generations.pop(), [payload for _, payload in answers]


@pytest.mark.slow
def test_searches_under_refresh_match_single_threaded_results_of_their_generation(corpus_copy, tmp_path):
    from hybridlab.search.engine import open_index

    index_dir, cache = tmp_path / "index", tmp_path / "embeddings.duckdb"
    commit(corpus_copy, index_dir, cache, 0)
    generation, answers = reference(index_dir)
    expected = {generation: answers}
    index = open_index(index_dir)
    errors: list[BaseException] = []
    seen: list[list[tuple[int, int, object]]] = [[] for _ in range(THREADS)]
    writer_done = threading.Event()

    def commit_all() -> None:
        try:
            for number in range(1, COMMITS + 1):
                committed = commit(corpus_copy, index_dir, cache, number)
                generation, answers = reference(index_dir)
                assert generation == committed
                expected[generation] = answers
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)
        finally:
            writer_done.set()

    def search_many(thread: int) -> None:
        try:
            done = 0
            while done < SEARCHES or not writer_done.is_set():  # at least SEARCHES, and under every commit
                case = (thread + done) % (len(CASES) + 1)
                generation, payload = answer(index, case)
                seen[thread].append((generation, case, payload))
                done += 1
                if done >= SEARCHES:
                    time.sleep(0.002)  # enough searches: keep searching under the commits, but let them run
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=search_many, args=(t,), name=f"search-{t}") for t in range(THREADS)]
    threads.append(threading.Thread(target=commit_all, name="commit"))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    index.close()
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert len(expected) == COMMITS + 1
    answered = [entry for entries in seen for entry in entries]
    assert all(len(entries) >= SEARCHES for entries in seen)
    generations_seen = {generation for generation, _, _ in answered}
    assert len(generations_seen) >= COMMITS // 2, generations_seen  # the searches really ran across commits
    mismatches = [
        (generation, case) for generation, case, payload in answered if payload != expected[generation][case]
    ]
    assert mismatches == [], f"{len(mismatches)} of {len(answered)} answers differ, e.g. {mismatches[:5]}"
    # consecutive generations answer differently, so a stale or mixed generation would show
    first, second = sorted(expected)[:2]
    assert expected[first][0] != expected[second][0]
