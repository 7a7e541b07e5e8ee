"""Fault injection: SIGKILL an `index` run at many points; the index must stay consistent and answer
exactly as before the run, and the next run must complete it (results then equal those of the same
update run left uninterrupted)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .helpers import MODEL_ARGS, cli, env, record, snapshot, write_corpus

EMBED_BATCH = "10"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """A base index of corpus v1, the corpus changed to v2 in place, and an uninterrupted update to v2."""
    root = tmp_path_factory.mktemp("kill")
    corpus = root / "corpus"
    write_corpus(corpus, range(150))
    base = root / "base"
    cli("index", str(corpus), "--index", str(base), *MODEL_ARGS, "-q")
    # v2: 20 documents removed, 20 changed, 120 added -> 140 chunks to embed = 14 batches of 10
    for i in range(130, 150):
        (corpus / f"doc{i:04d}.md").unlink()
    write_corpus(corpus, range(20), version=1)
    write_corpus(corpus, range(1000, 1120))
    # the reference: the same update run uninterrupted (a from-scratch build assigns chunk ids in
    # another order, which changes how rank ties break, so it is not bit-identical)
    clean = root / "clean"
    shutil.copytree(base, clean)
    cli("index", str(corpus), "--index", str(clean), *MODEL_ARGS, "-q")
    return {
        "root": root,
        "corpus": corpus,
        "base": base,
        "base_results": snapshot(base),
        "clean_results": snapshot(clean),
        "generation": _generation(base),
    }


def _generation(index_dir: Path) -> int:
    return json.loads((index_dir / "manifest.json").read_text())["generation"]


def _start(corpus: Path, index_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hybridlab.cli",
            "index",
            str(corpus),
            "--index",
            str(index_dir),
            *MODEL_ARGS,
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env(HYBRIDLAB_TRACE_STAGES="1", HYBRIDLAB_EMBED_BATCH=EMBED_BATCH),
    )


def kill_after_stage(corpus: Path, index_dir: Path, stage_number: int) -> list[str]:
    """Run `index` and SIGKILL it as soon as it has printed its `stage_number`-th STAGE line
    (0 = right after start-up). Returns the stages it printed."""
    process = _start(corpus, index_dir)
    stages: list[str] = []
    if stage_number == 0:
        time.sleep(0.3)
    else:
        for line in process.stdout:
            if line.startswith("STAGE "):
                stages.append(line.split()[1])
                if len(stages) >= stage_number:
                    break
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    process.stdout.close()
    return stages


def kill_at_stage(process: subprocess.Popen, stage_number: int) -> list[str]:
    """SIGKILL a traced process as soon as it has printed its `stage_number`-th STAGE line; the
    lines it printed until then."""
    lines, seen = [], 0
    for line in process.stdout:
        lines.append(line)
        if line.startswith("STAGE "):
            seen += 1
            if seen >= stage_number:
                break
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    process.stdout.close()
    return lines


def kill_after_seconds(corpus: Path, index_dir: Path, seconds: float) -> int:
    process = _start(corpus, index_dir)
    try:
        process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    process.stdout.close()
    return process.returncode


def check_after_kill(scenario, index_dir: Path) -> str:
    """The killed index opens, verifies clean and answers like before the run (or like the clean
    build when the kill came after the commit). Returns which state it is in."""
    from hybridlab.index.admin.verify import verify

    assert verify(index_dir) == []
    committed = _generation(index_dir) != scenario["generation"]
    expected = scenario["clean_results"] if committed else scenario["base_results"]
    assert snapshot(index_dir) == expected
    return "committed" if committed else "previous"


def complete(scenario, index_dir: Path) -> dict:
    """The next run completes the interrupted one; its results equal the clean build's."""
    from hybridlab.cli import build_parser, index_config_from_args
    from hybridlab.index.write.build import index_paths

    args = build_parser().parse_args(
        ["index", str(scenario["corpus"]), "--index", str(index_dir), *MODEL_ARGS, "-q"]
    )
    report = index_paths(args.paths, index_dir, index_config_from_args(args), progress=False).to_dict()
    assert snapshot(index_dir) == scenario["clean_results"]
    leftovers = sorted(p.name for p in index_dir.iterdir() if ".tmp-" in p.name)
    assert leftovers == []
    return report


@pytest.mark.slow
def test_kill_at_every_stage(scenario, tmp_path):
    """One kill after each STAGE line of an update run (≥ 20 points), plus one at start-up."""
    probe = tmp_path / "probe"
    shutil.copytree(scenario["base"], probe)
    all_stages = kill_after_stage(scenario["corpus"], probe, 10_000)  # runs to the end
    assert all_stages[-1] == "manifest-committed"
    assert all_stages.count("embedded-batch") == 14
    points = range(len(all_stages) + 1)
    states = []
    reembedded = []
    for k in points:
        index_dir = tmp_path / f"k{k:02d}"
        shutil.copytree(scenario["base"], index_dir)
        stages = kill_after_stage(scenario["corpus"], index_dir, k)
        states.append(check_after_kill(scenario, index_dir))
        report = complete(scenario, index_dir)
        reembedded.append(report["embedded"])
        # embeddings computed before the kill survive it: the completing run embeds only the rest
        batches_done = stages.count("embedded-batch")  # each is printed after its vectors are committed
        assert report["embedded"] == max(0, 140 - batches_done * int(EMBED_BATCH))
        shutil.rmtree(index_dir)
    assert len(points) >= 20
    assert "previous" in states
    record("kill_stage_points", len(points))
    record("kill_stage_states", {s: states.count(s) for s in set(states)})


@pytest.mark.soak
@pytest.mark.parametrize("cycle", range(3))
def test_kill_at_spread_times_soak(scenario, tmp_path, cycle):
    """Soak: 40 time-based kills at spread offsets per cycle, each followed by another kill of the
    resuming run on the same folder, then completion."""
    survived = 0
    states: list[str] = []
    for n in range(40):
        index_dir = tmp_path / f"t{n:02d}"
        shutil.copytree(scenario["base"], index_dir)
        offset = 0.2 + (n * 0.137 + cycle * 0.05) % 4.0
        kill_after_seconds(scenario["corpus"], index_dir, offset)
        states.append(check_after_kill(scenario, index_dir))
        kill_after_seconds(scenario["corpus"], index_dir, offset / 2)
        states.append(check_after_kill(scenario, index_dir))
        complete(scenario, index_dir)
        shutil.rmtree(index_dir)
        survived += 2
    record(f"kill_time_points_cycle{cycle}", survived)
    record(f"kill_time_states_cycle{cycle}", {s: states.count(s) for s in set(states)})
    assert "previous" in states  # some kills did land before the commit


def _close(got: dict, expected: dict) -> bool:
    """Same documents per query, scores equal to 1e-6 (a merge may change a cosine's last float bit)."""
    return got.keys() == expected.keys() and all(
        run.keys() == expected[q].keys() and all(abs(s - expected[q][d]) <= 1e-6 for d, s in run.items())
        for q, run in got.items()
    )


@pytest.fixture(scope="module")
def segment_scenario(tmp_path_factory):
    """An index of three segments (a build and two small writes); the next run deletes, changes and
    adds a few documents (tombstones + a segment) and, with a merge factor of 3, merges afterwards."""
    root = tmp_path_factory.mktemp("kill-segments")
    corpus = root / "corpus"
    write_corpus(corpus, range(40))
    base = root / "base"
    cli("index", str(corpus), "--index", str(base), *MODEL_ARGS, "-q")
    for batch in (range(40, 43), range(43, 46)):
        write_corpus(corpus, batch)
        cli("index", str(corpus), "--index", str(base), *MODEL_ARGS, "-q")
    for i in range(5):
        (corpus / f"doc{i:04d}.md").unlink()
    write_corpus(corpus, range(10, 13), version=1)
    write_corpus(corpus, range(46, 49))
    clean = root / "clean"
    shutil.copytree(base, clean)
    cli("index", str(corpus), "--index", str(clean), *MODEL_ARGS, "-q", HYBRIDLAB_MERGE_FACTOR="3")
    clean_manifest = json.loads((clean / "manifest.json").read_text())
    assert clean_manifest["last_merge"]["reason"] == "tiered policy"
    return {
        "corpus": corpus,
        "base": base,
        "base_results": snapshot(base),
        "clean_results": snapshot(clean),
        "generation": _generation(base),
    }


@pytest.mark.slow
@pytest.mark.xdist_group("kill-segments")  # the two of segment_scenario together
def test_kill_at_every_stage_of_a_write_with_deletes_and_a_merge(segment_scenario, tmp_path):
    """SIGKILL after each stage of a run that tombstones, writes a segment, merges it with its tier
    and commits: the index verifies clean and answers as before the run or as after it."""
    from hybridlab.index.admin.verify import verify

    scenario = segment_scenario

    def start(index_dir: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hybridlab.cli",
                "index",
                str(scenario["corpus"]),
                "--index",
                str(index_dir),
                *MODEL_ARGS,
                "-q",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env(HYBRIDLAB_TRACE_STAGES="1", HYBRIDLAB_MERGE_FACTOR="3"),
        )

    probe = tmp_path / "probe"
    shutil.copytree(scenario["base"], probe)
    process = start(probe)
    all_stages = [line.split()[1] for line in process.stdout if line.startswith("STAGE ")]
    process.wait(timeout=120)
    process.stdout.close()
    assert (
        all_stages.count("manifest-committed") == 1 and "merge-start" in all_stages
    )  # one commit, merge included
    states = []
    for k in range(1, len(all_stages) + 1):
        index_dir = tmp_path / f"s{k:02d}"
        shutil.copytree(scenario["base"], index_dir)
        kill_at_stage(start(index_dir), k)
        assert verify(index_dir) == []
        committed = _generation(index_dir) != scenario["generation"]
        results = snapshot(index_dir)
        assert _close(results, scenario["clean_results"] if committed else scenario["base_results"])
        states.append("committed" if committed else "previous")
        cli(
            "index",
            str(scenario["corpus"]),
            "--index",
            str(index_dir),
            *MODEL_ARGS,
            "-q",
            HYBRIDLAB_MERGE_FACTOR="3",
        )
        assert _close(snapshot(index_dir), scenario["clean_results"])
        assert sorted(p.name for p in index_dir.iterdir() if ".tmp-" in p.name) == []
        shutil.rmtree(index_dir)
    assert {"committed", "previous"} <= set(states)
    record("kill_segment_stage_points", len(all_stages))


STORE_SCRIPT = """
import sys
from hybridlab.index.write.memory import MemoryWriter
writer = MemoryWriter(sys.argv[1], wal_records=3)
for i in range(5):
    stored = writer.store(f"zqkill{i} memory stored through the write-ahead log", ["kill"])
    print("ACK", stored.id, flush=True)
"""


@pytest.mark.slow
@pytest.mark.xdist_group("kill-segments")  # the two of segment_scenario together
def test_kill_at_every_stage_of_memory_stores_and_a_log_fold(segment_scenario, tmp_path):
    """SIGKILL a writer storing 5 memories through the write-ahead log (3 per log: one fold, with
    its commit and merge stages) after each stage it reports: the index verifies clean, every
    acknowledged memory is found, and a next writer (and `optimize`) carries on from there."""
    from hybridlab.index.admin.verify import verify
    from hybridlab.index.write.build import optimize
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    def start(index_dir: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-c", STORE_SCRIPT, str(index_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env(HYBRIDLAB_TRACE_STAGES="1"),
        )

    probe = tmp_path / "probe"
    shutil.copytree(segment_scenario["base"], probe)
    process = start(probe)
    lines = [line.split() for line in process.stdout]
    process.wait(timeout=120)
    process.stdout.close()
    stages = [line[1] for line in lines if line[0] == "STAGE"]
    assert stages.count("wal-synced") == 5 and stages.count("manifest-committed") == 1  # 5 appends, 1 fold
    states = []
    for k in range(1, len(stages) + 1):
        index_dir = tmp_path / f"w{k:02d}"
        shutil.copytree(segment_scenario["base"], index_dir)
        acknowledged = [
            line.split()[1] for line in kill_at_stage(start(index_dir), k) if line.startswith("ACK ")
        ]
        assert verify(index_dir) == [], k
        with open_index(index_dir) as index:
            held = set(index.snapshot().generation.doc_ids)
            assert set(acknowledged) <= held, (k, stages[k - 1])
            states.append(index.stats().write_ahead_log.memories)
        after = MemoryWriter(index_dir, wal_records=3).store(
            "zqafter a memory stored after the kill", ["kill"]
        )
        optimize(index_dir)
        assert verify(index_dir) == []
        with open_index(index_dir) as index:
            assert {*acknowledged, after.id} <= set(index.snapshot().generation.doc_ids)
            assert index.stats().write_ahead_log.memories == 0
        shutil.rmtree(index_dir)
    assert len(stages) >= 15 and max(states) >= 1
    record("kill_memory_store_points", len(stages))


LIFECYCLE_SCRIPT = """
import sys
from hybridlab.index.write.memory import MemoryWriter
from hybridlab.search.engine import open_index

index_dir = sys.argv[1]
writer = MemoryWriter(index_dir, wal_records=3)

def current(doc_id):
    with open_index(index_dir) as index:
        return index.get_document(doc_id)

ids = {}
for op, key, new in [("store", "a", None), ("update", "mem-seed-00001", "zqkillseed the first seed memory, revised"),
                     ("delete", "mem-seed-00002", None), ("update", "a", "zqkilla memory a, revised"),
                     ("store", "b", None), ("delete", "b", None)]:
    if op == "store":  # into the write-ahead log
        ids[key] = writer.store(f"zqkill{key} memory {key} in the log", ["kill"]).id
        print("ACK store", ids[key], key, flush=True)
        continue
    doc_id = ids.get(key, key)
    print("BEGIN", op, doc_id, flush=True)
    writer.update(current(doc_id), content=new) if new else writer.delete([doc_id])
    print("ACK", op, doc_id, flush=True)
"""


@pytest.mark.slow
@pytest.mark.xdist_group("kill-memory-updates")  # no module fixture: may run beside the others
def test_kill_at_every_stage_of_memory_updates_and_deletes(tmp_path):
    """SIGKILL a writer after each stage of: a store (write-ahead log), an update and a delete of
    segment memories (a re-put and a tombstone appended to the log; the third record folds it), an
    update of the stored one (in a segment now), a store and its delete (a tombstone; the fold again).
    After each kill the index verifies clean; every acknowledged update reads its new text, every
    acknowledged delete is gone; the operation in flight is whole or absent (old or new text; there
    or gone), and nothing not yet begun has changed."""
    from bench.mcp_load import build_index, memory_rows
    from hybridlab.index.admin.verify import verify
    from hybridlab.search.engine import open_index

    base = build_index(tmp_path / "base", 20)
    seeds = {row["id"]: row["content"] for row in memory_rows(20)}

    def start(index_dir: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-c", LIFECYCLE_SCRIPT, str(index_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env(HYBRIDLAB_TRACE_STAGES="1"),
        )

    def run(index_dir: Path, kill_at: int | None) -> list[list[str]]:
        process = start(index_dir)
        if kill_at is None:
            lines = list(process.stdout)
            process.wait(timeout=120)
            process.stdout.close()
        else:
            lines = kill_at_stage(process, kill_at)
        return [line.split() for line in lines]

    probe = tmp_path / "probe"
    shutil.copytree(base, probe)
    lines = run(probe, None)
    assert [line[:2] for line in lines if line[0] == "ACK"][-1] == ["ACK", "delete"], lines[-3:]
    stages = [line[1] for line in lines if line[0] == "STAGE"]
    states = []
    for k in range(1, len(stages) + 1):
        index_dir = tmp_path / f"k{k:02d}"
        shutil.copytree(base, index_dir)
        lines = run(index_dir, k)
        assert verify(index_dir) == [], k
        stored = {
            line[2]: f"zqkill{line[3]} memory {line[3]} in the log"
            for line in lines
            if line[:2] == ["ACK", "store"]
        }
        olds = {**seeds, **stored}
        acked = {(line[1], line[2]) for line in lines if line[0] == "ACK" and line[1] != "store"}
        begun = [(line[1], line[2]) for line in lines if line[0] == "BEGIN"]
        with open_index(index_dir) as index:

            def text(doc_id: str) -> str | None:
                try:
                    return index.get_document(doc_id).text
                except KeyError:
                    return None

            assert all(text(doc_id) is not None or ("delete", doc_id) in begun for doc_id in stored), k
            for op, doc_id in begun:
                now = text(doc_id)
                if (op, doc_id) in acked:
                    assert now is None if op == "delete" else now is not None and now.endswith("revised"), (
                        k,
                        op,
                        doc_id,
                    )
                elif op == "delete":  # in flight at the kill: all or nothing
                    assert now in {None, olds[doc_id]}, (k, op, doc_id, now)
                    states.append(("in flight", op, stages[k - 1]))
                else:
                    assert now == olds[doc_id] or (now or "").endswith("revised"), (k, op, doc_id, now)
                    states.append(("in flight", op, stages[k - 1]))
            for doc_id in set(seeds) - {doc_id for _, doc_id in begun}:
                assert text(doc_id) == seeds[doc_id], (k, doc_id)
        shutil.rmtree(index_dir)
    # killed in the log append of an update and of a delete (written, not yet synced; synced, not acknowledged)
    assert len(stages) >= 20 and {
        ("in flight", op, stage) for op in ("update", "delete") for stage in ("wal-written", "wal-synced")
    } <= set(states), sorted(set(states))
    record("kill_memory_lifecycle_points", len(stages))
