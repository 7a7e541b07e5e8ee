"""Index build speed of the default model per document backend (issue 30): torch (before) against
the ONNX fp32 twin (after), the whole `apply_changes` build of SciFact documents in fresh processes
with private, empty embeddings caches, alternating backends so both see the same machine load.

    python -m bench.build_speed [--documents 1000] [--repeats 3] [--full]
    python -m bench.build_speed --command --before 0668538 [--documents 1500] [--repeats 3]

`--full` also builds all of SciFact with the ONNX documents and scores the default hybrid on
SciFact test against the same evaluation of a torch-built index (the condition: within 0.002).
Writes `reports/bench/<date>-build-speed/` (results.json, report.md, build_speed.png).

`--command` times the whole `hybridlab index` command instead (a fresh interpreter each: imports,
model load, reading, embedding, writing -- what a user waits for, and how issue 30 measured
"today"): the package at `--before REV` (its files extracted from git, run with this venv), this
checkout with torch documents, and this checkout's default, alternating, on the first N SciFact
documents written as a BEIR folder. Writes `reports/bench/<date>-NAME/` (default NAME build-command).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import bench_env, machine_info, run_worker, worker_main
from hybridlab.config import REPO_ROOT

BACKENDS = ("torch", "onnx")


def measure_build(arguments: dict[str, Any]) -> dict[str, Any]:
    """Worker: one build of the first `documents` SciFact documents with documents embedded by `backend`."""
    os.environ["HYBRIDLAB_DOCUMENT_BACKEND"] = (
        "torch" if arguments["backend"] == "cuda" else arguments["backend"]
    )
    os.environ["HYBRIDLAB_DEVICE"] = "cuda" if arguments["backend"] == "cuda" else "cpu"
    from hybridlab.config import IndexConfig
    from hybridlab.eval.evalsets import get_evalset
    from hybridlab.index.write.build import apply_changes
    from hybridlab.ingest.sources import IngestReport, read_source

    documents = read_source(get_evalset("scifact").sources[0], IngestReport())
    documents = documents[: int(arguments["documents"])] if arguments["documents"] else documents
    work = Path(tempfile.mkdtemp(prefix="hybridlab-bench-build-"))
    index_dir = Path(arguments.get("keep") or work / "index")
    try:
        started = time.perf_counter()
        report = apply_changes(
            index_dir,
            [(documents[0].source, documents, True)],
            IndexConfig(),
            progress=False,
            cache_path=work / "embeddings.duckdb",
        )
        seconds = time.perf_counter() - started
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "backend": arguments["backend"],
        "documents": len(documents),
        "chunks": report.embedded,
        "seconds": seconds,
        "embed_seconds": report.embed_seconds,
        "chunks_per_s": report.embedded / seconds,
    }


def before_checkout(revision: str) -> Path:
    """The package files of `revision` (extracted from git once into .cache/), to run with this venv."""
    folder = REPO_ROOT / ".cache" / f"bench-before-{revision}"
    if not (folder / "hybridlab" / "__init__.py").exists():
        folder.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "archive", revision, "hybridlab", "configs", "pyproject.toml"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return folder


def time_command(arm: str, corpus: Path, work: Path, before: Path | None) -> dict[str, Any]:
    """Wall seconds of one whole `hybridlab index CORPUS --index NEW` in a fresh interpreter."""
    index_dir = work / f"index-{arm}-{time.monotonic_ns()}"
    env = {**bench_env(), "HYBRIDLAB_DOCUMENT_BACKEND": "torch" if arm == "torch" else "auto"}
    cwd = before if arm == "before" else REPO_ROOT  # the interpreter imports `hybridlab` from its cwd first
    script = "import sys; from hybridlab.cli import main; sys.exit(main(sys.argv[1:]))"
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script, "index", str(corpus), "--index", str(index_dir), "-q"],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    chunks = int(
        re.search(r"(\d+) embedded", done.stdout + done.stderr).group(1)
    )  # the command's summary line
    shutil.rmtree(index_dir, ignore_errors=True)
    return {"arm": arm, "seconds": seconds, "chunks": chunks}


def command_main(args: argparse.Namespace) -> int:
    """The `--command` mode: whole `hybridlab index` commands, before/torch/default, alternating."""
    from hybridlab.eval.evalsets import get_evalset

    out = REPO_ROOT / "reports" / "bench" / f"{dt.date.today().isoformat()}-{args.name or 'build-command'}"
    out.mkdir(parents=True, exist_ok=True)
    before = before_checkout(args.before) if args.before else None
    arms = ["before", "torch", "default"] if before else ["torch", "default"]
    work = Path(tempfile.mkdtemp(prefix="hybridlab-bench-command-", dir=REPO_ROOT / ".cache"))
    try:
        corpus = work / "scifact-subset"
        corpus.mkdir()
        source = Path(get_evalset("scifact").sources[0])
        source = next(p for p in (source / "corpus.jsonl", source / "corpus.jsonl.gz", source) if p.is_file())
        import gzip

        with gzip.open(source, "rt") if source.suffix == ".gz" else source.open() as lines:
            (corpus / "corpus.jsonl").write_text(
                "".join(line for _, line in zip(range(args.documents), lines))
            )
        warm = work / "warm-up"
        warm.mkdir()
        (warm / "corpus.jsonl").write_text(
            "".join((corpus / "corpus.jsonl").read_text().splitlines(True)[:20])
        )
        for arm in arms:  # 20 documents, not timed: the ONNX twin's one-time export, the OS file cache
            time_command(arm, warm, work, before)
        rows = []
        for repeat in range(args.repeats):
            for arm in arms if repeat % 2 == 0 else arms[::-1]:
                rows.append(time_command(arm, corpus, work, before))
                print(f"  {arm}: {rows[-1]['seconds']:.1f} s", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for row in rows:
        row["chunks_per_s"] = row["chunks"] / row["seconds"]
    medians = {arm: statistics.median(r["seconds"] for r in rows if r["arm"] == arm) for arm in arms}
    reference = "before" if before else "torch"
    results = {
        "command": "python -m bench.build_speed " + " ".join(sys.argv[1:]),
        "machine": machine_info(),
        "before": args.before,
        "documents": args.documents,
        "rows": rows,
        "median_seconds": medians,
        "ratio_default_vs_" + reference: medians[reference] / medians["default"],
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    names = {
        "before": f"before ({args.before}, torch)",
        "torch": "now, torch documents",
        "default": "now, default (ONNX documents)",
    }
    lines = [
        f"# Whole `hybridlab index` command, before and after — {out.name}",
        "",
        (
            f"Command: `{results['command']}`; {results['machine'].get('cpu_model')} "
            f"({results['machine'].get('cores')} cores), load at start {results['machine'].get('load_average')}. "
            f"The first {args.documents} SciFact documents as a BEIR folder; each arm a fresh interpreter, a new "
            "index folder (so an empty embeddings cache), arms alternating after one untimed 20-document warm-up each."
        ),
        "",
        "| arm | runs | median s | chunks/s | seconds each |",
        "|---|---|---|---|---|",
    ]
    for arm in arms:
        each = [r["seconds"] for r in rows if r["arm"] == arm]
        chunks = rows[[r["arm"] for r in rows].index(arm)]["chunks"]
        lines.append(
            f"| {names[arm]} | {len(each)} | {medians[arm]:.1f} | {chunks / medians[arm]:.1f} | "
            f"{', '.join(f'{v:.1f}' for v in each)} |"
        )
    lines += [
        "",
        f"**Ratio (median {reference} / median default): {medians[reference] / medians['default']:.2f}×.**",
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


def same_vectors(sample: int = 300) -> dict[str, float]:
    """Both backends' vectors of the first `sample` SciFact chunk texts: max |difference| and min cosine."""
    import numpy as np

    from hybridlab.encoders.registry import load_document_encoder
    from hybridlab.eval.evalsets import get_evalset
    from hybridlab.ingest.sources import IngestReport, read_source

    documents = read_source(get_evalset("scifact").sources[0], IngestReport())[:sample]
    texts = [f"{d.title}\n{d.text}" for d in documents]
    torch_vectors = load_document_encoder("all-MiniLM-L6-v2", "torch").encode_documents(texts)
    onnx_vectors = load_document_encoder("all-MiniLM-L6-v2", "onnx").encode_documents(texts)
    return {
        "texts": len(texts),
        "max_abs_diff": float(np.abs(torch_vectors - onnx_vectors).max()),
        "min_cosine": float((torch_vectors * onnx_vectors).sum(axis=1).min()),
    }


def gpu_rows(documents: int) -> list[dict[str, Any]]:
    """One `--device cuda` build and the cosine of its vectors against the CPU's, where a GPU is at hand."""
    import torch

    if not torch.cuda.is_available():
        return []
    row = run_worker("bench.build_speed", {"backend": "cuda", "documents": documents})

    from hybridlab.encoders.registry import load_document_encoder
    from hybridlab.eval.evalsets import get_evalset
    from hybridlab.ingest.sources import IngestReport, read_source

    texts = [
        f"{d.title}\n{d.text}" for d in read_source(get_evalset("scifact").sources[0], IngestReport())[:1000]
    ]
    cpu = load_document_encoder("all-MiniLM-L6-v2", "onnx").encode_documents(texts)
    os.environ["HYBRIDLAB_DEVICE"] = "cuda"
    gpu = load_document_encoder("all-MiniLM-L6-v2", "torch").encode_documents(texts)
    row["min_cosine_vs_cpu"] = float((cpu * gpu).sum(axis=1).min())
    return [row]


def ndcg_on_scifact_test(index_dir: Path) -> float:
    """The default hybrid's nDCG@10 on SciFact test (`hybridlab eval --json`, queries encoded as always)."""
    command = [
        sys.executable,
        "-m",
        "hybridlab.cli",
        "eval",
        "--index",
        str(index_dir),
        "--dataset",
        "scifact",
        "--json",
        "-q",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout)["metrics"]["ndcg@10"])


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 3.5))
    for i, backend in enumerate(BACKENDS):
        values = [r["chunks_per_s"] for r in rows if r["backend"] == backend]
        axes.scatter([i] * len(values), values, alpha=0.6)
        axes.hlines(statistics.median(values), i - 0.2, i + 0.2, color="black")
    axes.set(
        xticks=range(len(BACKENDS)),
        xticklabels=[f"{b} (documents)" for b in BACKENDS],
        ylabel="chunks/s, whole index build",
        title="SciFact build, all-MiniLM-L6-v2 (line: median)",
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.build_speed", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--documents", type=int, default=1000, help="the first N SciFact documents (0 = all 5,183)"
    )
    parser.add_argument(
        "--name", help="the report folder: reports/bench/<date>-NAME (default build-speed, build-command)"
    )
    parser.add_argument(
        "--command", action="store_true", help="time whole `hybridlab index` commands (see above)"
    )
    parser.add_argument(
        "--before", metavar="REV", help="with --command: also the package at git revision REV"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="also the SciFact test condition (full builds)")
    parser.add_argument(
        "--torch-index", type=Path, help="a torch-built SciFact index for --full (default: build one)"
    )
    args = parser.parse_args(argv)
    if args.command:
        return command_main(args)
    out = REPO_ROOT / "reports" / "bench" / f"{dt.date.today().isoformat()}-{args.name or 'build-speed'}"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for repeat in range(args.repeats):
        for backend in BACKENDS if repeat % 2 == 0 else BACKENDS[::-1]:
            rows.append(run_worker("bench.build_speed", {"backend": backend, "documents": args.documents}))
            print(f"  {backend}: {rows[-1]['chunks_per_s']:.1f} chunks/s", file=sys.stderr, flush=True)
    medians = {b: statistics.median(r["chunks_per_s"] for r in rows if r["backend"] == b) for b in BACKENDS}
    results: dict[str, Any] = {
        "command": "python -m bench.build_speed " + " ".join(argv or sys.argv[1:]),
        "machine": machine_info(),
        "rows": rows,
        "median_chunks_per_s": medians,
        "ratio": medians["onnx"] / medians["torch"],
        "vectors": same_vectors(),
        "gpu": gpu_rows(args.documents),
    }
    if args.full:
        work = Path(tempfile.mkdtemp(prefix="hybridlab-bench-full-", dir=REPO_ROOT / ".cache"))
        try:
            full = {}
            for backend in BACKENDS:
                index_dir = args.torch_index if backend == "torch" and args.torch_index else work / backend
                if index_dir == work / backend:
                    full[backend] = run_worker(
                        "bench.build_speed", {"backend": backend, "documents": 0, "keep": str(index_dir)}
                    )
                full.setdefault(backend, {})["ndcg@10"] = ndcg_on_scifact_test(index_dir)
            results["scifact_test"] = full
            results["ndcg_delta"] = full["onnx"]["ndcg@10"] - full["torch"]["ndcg@10"]
        finally:
            shutil.rmtree(work, ignore_errors=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    plot(rows, out / "build_speed.png")
    lines = [
        f"# Index build speed by document backend — {out.name}",
        "",
        (
            f"Command: `{results['command']}`; "
            f"{results['machine'].get('cpu_model')} ({results['machine'].get('cores')} cores), load at start "
            f"{results['machine'].get('load_average')}. Fresh process and empty embeddings cache per build, backends alternating."
        ),
        "",
        "| backend (documents) | builds | median chunks/s | chunks/s each |",
        "|---|---|---|---|",
    ]
    for backend in BACKENDS:
        each = [r["chunks_per_s"] for r in rows if r["backend"] == backend]
        lines.append(
            f"| {backend} | {len(each)} | {medians[backend]:.1f} | {', '.join(f'{v:.1f}' for v in each)} |"
        )
    vectors = results["vectors"]
    lines += [
        "",
        f"**Ratio (median onnx / median torch): {results['ratio']:.2f}×** on {rows[0]['chunks']} chunks.",
        (
            f"Same vectors: over {vectors['texts']} SciFact texts max |difference| {vectors['max_abs_diff']:.2e}, "
            f"min cosine {vectors['min_cosine']:.7f}."
        ),
    ]
    lines += [
        f"GPU: `--device cuda` {r['chunks_per_s']:.1f} chunks/s, min cosine to the CPU vectors "
        f"{r['min_cosine_vs_cpu']:.5f}."
        for r in results["gpu"]
    ] or ["GPU: not run (no GPU on this machine; this session was not lent a device machine)."]
    if "scifact_test" in results:
        full = results["scifact_test"]
        lines += ["", "| SciFact test, default hybrid | nDCG@10 | build chunks/s |", "|---|---|---|"]
        lines += [
            f"| {b} documents | {full[b]['ndcg@10']:.4f} | {full[b].get('chunks_per_s', float('nan')):.1f} |"
            for b in BACKENDS
        ]
        lines.append(f"\nDelta {results['ndcg_delta']:+.4f} (condition: within 0.002).")
    lines += ["", "![build speed](build_speed.png)", ""]
    (out / "report.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if not worker_main(sys.argv[1:], measure_build):
        raise SystemExit(main())
