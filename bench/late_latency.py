"""What the second stage costs at query time, beside the cross-encoder, and the search refactor's
latency before/after, interleaved in one run.

A memory index of conversation turns (LoCoMo's first conversations when `--locomo` is given, else
the repository's memories set) is built once with token vectors of the bundled ColBERT model; each
configuration then runs in a fresh worker process, one query at a time (`Index.search`, limit 10,
query vectors not cached across queries: every question is asked once per repeat):

- `first stage`: the defaults, no second stage;
- `late d=N`: the late-interaction stage over the first stage's top N (stored token vectors);
- `cross-encoder d=30`: the shipped ms-marco-MiniLM-L-12 INT8 over the top 30.

`--before REV` also runs the first stage with the package of another commit (a git worktree),
interleaved with this checkout's: before, after, before, after, ... Medians of per-repeat P50s.

    python -m bench.late_latency --out reports/bench/DATE-late-latency [--locomo PATH] [--before ee24b3d]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WORKER = r"""
import json, sys, time, statistics
from hybridlab.search.engine import open_index
index_dir, options, queries, repeats = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
index = open_index(index_dir)
for q in queries[:5]:
    index.search(q, **options)
p50s, p95s = [], []
for _ in range(repeats):
    times = []
    for q in queries:
        models = getattr(index, "query_models", index)
        for cache in ("_query_vectors", "_late_queries"):
            getattr(models, cache, None) is not None and getattr(models, cache).clear()
        started = time.perf_counter()
        index.search(q, **options)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    p50s.append(statistics.median(times))
    p95s.append(times[int(0.95 * (len(times) - 1))])
print(json.dumps({"p50_ms": statistics.median(p50s), "p95_ms": statistics.median(p95s), "queries": len(queries)}))
"""


def memories_and_questions(locomo: str | None, conversations: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Turns stored as memories (no context: what a client passes by default) and the questions."""
    if locomo:
        from hybridlab.eval.conversations.locomo import read_locomo

        haystacks = read_locomo(locomo)[:conversations]
        memories = [
            {**m, "id": f"{h.haystack_id}/{m['id']}"}
            for h in haystacks
            for m in h.memories("turn", context=False)
        ]
        questions = [q.text for h in haystacks for q in h.questions]
        return memories, questions
    root = Path(__file__).resolve().parents[1] / "ground_truth" / "memories"
    memories = [
        json.loads(line) for line in (root / "memories.jsonl").read_text().splitlines() if line.strip()
    ]
    questions = [
        json.loads(line)["text"] for line in (root / "queries.jsonl").read_text().splitlines() if line.strip()
    ]
    return memories, questions


def build(work: Path, memories: list[dict[str, Any]], late: bool = True) -> tuple[Path, float]:
    """The memories' index, with token vectors (`late`) or as a build before them wrote it (older
    code cannot read a config naming `late_models`)."""
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths

    source = work / "memories.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in memories))
    folder = work / ("index" if late else "plain")
    started = time.perf_counter()
    index_paths([source], folder, IndexConfig(late_models=("colbert",) if late else ()), progress=True)
    if not late:
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["config"].pop("late_models", None)
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return folder, time.perf_counter() - started


def run_worker(
    tree: Path, index_dir: Path, options: dict[str, Any], queries: list[str], repeats: int
) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            WORKER,
            str(index_dir),
            json.dumps(options),
            json.dumps(queries),
            str(repeats),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--locomo", default=None)
    parser.add_argument("--conversations", type=int, default=2)
    parser.add_argument("--queries", type=int, default=150)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--depths", default="30,100")
    parser.add_argument(
        "--before", default=None, help="a commit whose first stage is timed interleaved with this one"
    )
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parents[1]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    memories, questions = memories_and_questions(args.locomo, args.conversations)
    questions = questions[: args.queries]
    results: dict[str, Any] = {"memories": len(memories), "queries": len(questions), "repeats": args.repeats}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        index_dir, seconds = build(work, memories)
        results["build_seconds_with_token_vectors"] = round(seconds, 1)
        from hybridlab.encoders.late import get_late_spec
        from hybridlab.index.format.tokens import TokenStore, store_folder

        store = TokenStore(store_folder(index_dir, get_late_spec("colbert").key))
        results["token_bytes_per_memory"] = round(store.nbytes() / len(memories))
        configs: dict[str, dict[str, Any]] = {"first stage": {"late_depth": 0}}
        for depth in (int(d) for d in args.depths.split(",")):
            configs[f"late d={depth}"] = {"late_depth": depth}
        configs["cross-encoder d=30"] = {"late_depth": 0, "rerank_depth": 30}
        results["configs"] = {
            name: run_worker(here, index_dir, options, questions, args.repeats)
            for name, options in configs.items()
        }
        if args.before:
            plain, _ = build(work, memories, late=False)
            results["before_after"] = before_after(here, args.before, plain, questions, args.repeats)
    (out / "latency.json").write_text(json.dumps(results, indent=2))
    (out / "README.md").write_text(to_markdown(results, args))
    print((out / "README.md").read_text())
    return 0


def before_after(here: Path, rev: str, index_dir: Path, queries: list[str], repeats: int) -> dict[str, Any]:
    tree = Path(tempfile.mkdtemp()) / "before"
    subprocess.run(
        ["git", "-C", str(here), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        capture_output=True,
    )
    try:
        pairs = []
        for _ in range(3):
            before = run_worker(tree, index_dir, {}, queries, repeats)["p50_ms"]
            after = run_worker(here, index_dir, {}, queries, repeats)["p50_ms"]
            pairs.append((before, after))
    finally:
        subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(tree)], check=False)
    ratios = [a / b for b, a in pairs]
    return {"rev": rev, "pairs_p50_ms": pairs, "ratio_median": statistics.median(ratios)}


def to_markdown(results: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        "# Second-stage cost at query time (one query at a time, 2 cores)",
        "",
        (
            f"{results['memories']} memories, {results['queries']} questions x {results['repeats']} repeats; "
            f"build with token vectors {results['build_seconds_with_token_vectors']} s; "
            f"token vectors {results['token_bytes_per_memory']} bytes per memory (float16 x 128)."
        ),
        "",
        "| configuration | P50 ms | P95 ms |",
        "|---|---|---|",
    ]
    for name, row in results["configs"].items():
        lines.append(f"| {name} | {row['p50_ms']:.1f} | {row['p95_ms']:.1f} |")
    if "before_after" in results:
        ba = results["before_after"]
        lines += [
            "",
            f"First stage before ({ba['rev']}) / after, interleaved P50 ms: "
            + ", ".join(f"{b:.1f} / {a:.1f}" for b, a in ba["pairs_p50_ms"])
            + f"; median ratio after/before x{ba['ratio_median']:.2f}",
        ]
    lines += [
        "",
        f"Command: `python -m bench.late_latency --out {args.out}"
        + (" --locomo PATH" if args.locomo else "")
        + (f" --before {args.before}" if args.before else "")
        + "`",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
