"""The README's model table (issue 30): per embedding model, a whole SciFact index build (chunks/s)
and nDCG@10 on SciFact test for the dense retriever alone and the default hybrid.

    python -m bench.model_table [--models all-MiniLM-L6-v2 bge-small-en-v1.5 ...] [--keep DIR]

Each model's index is built once by `hybridlab index` (a fresh process, a private empty embeddings
cache) into `--keep` (default `.cache/bench-models/`) and scored by `hybridlab eval`; a model whose
index exists there is only scored (its build figures are read back from the earlier results).
Writes `reports/bench/<date>-models/` (results.json, report.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import machine_info
from hybridlab.config import REPO_ROOT

MODELS = ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2-onnx-int8", "bge-small-en-v1.5", "wordllama")


def hybridlab(*arguments: str) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "hybridlab.cli", *arguments],
        check=False,
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode != 0:
        raise RuntimeError(f"hybridlab {' '.join(arguments)} failed: {done.stderr[-2000:]}")
    return done.stdout


def ndcg(index_dir: Path, *options: str) -> float:
    report = json.loads(
        hybridlab("eval", "--index", str(index_dir), "--dataset", "scifact", "--json", "-q", *options)
    )
    return float(report["metrics"]["ndcg@10"])


def measure(model: str, keep: Path, earlier: dict[str, Any]) -> dict[str, Any]:
    index_dir = keep / model
    row = dict(earlier.get(model) or {})
    if not (index_dir / "manifest.json").exists():
        shutil.rmtree(index_dir, ignore_errors=True)
        started = time.perf_counter()
        hybridlab(
            "index",
            str(REPO_ROOT.parent / "shared" / "datasets" / "scifact"),
            "--model",
            model,
            "--index",
            str(index_dir),
            "-q",
        )
        seconds = time.perf_counter() - started
        chunks = json.loads((index_dir / "manifest.json").read_text())["counts"]["chunks"]
        row = {
            "model": model,
            "chunks": chunks,
            "build_seconds": seconds,
            "chunks_per_s": chunks / seconds,
            "load_average_after": os.getloadavg()[0],
        }
    row["ndcg@10 dense"] = ndcg(index_dir, "--mode", "vector")
    row["ndcg@10 hybrid"] = ndcg(index_dir)
    print(
        f"  {model}: {row['chunks_per_s']:.1f} chunks/s, dense {row['ndcg@10 dense']:.4f}, "
        f"hybrid {row['ndcg@10 hybrid']:.4f}",
        file=sys.stderr,
        flush=True,
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_table", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--keep", type=Path, default=REPO_ROOT / ".cache" / "bench-models")
    args = parser.parse_args(argv)
    out = REPO_ROOT / "reports" / "bench" / f"{dt.date.today().isoformat()}-models"
    out.mkdir(parents=True, exist_ok=True)
    args.keep.mkdir(parents=True, exist_ok=True)
    earlier_file = args.keep / "builds.json"
    earlier = json.loads(earlier_file.read_text()) if earlier_file.exists() else {}
    rows = [measure(model, args.keep, earlier) for model in args.models]
    earlier_file.write_text(json.dumps({**earlier, **{r["model"]: r for r in rows}}, indent=2))
    results = {
        "command": "python -m bench.model_table " + " ".join(argv or sys.argv[1:]),
        "machine": machine_info(),
        "rows": rows,
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        f"# Embedding models on SciFact test — {out.name}",
        "",
        (
            f"Command: `{results['command']}`. Whole `hybridlab index` of SciFact (5,183 documents) per model, fresh "
            "process, empty embeddings cache; nDCG@10 on the 300 test queries by `hybridlab eval` (dense = "
            "`--mode vector`, hybrid = the defaults). The load after each build is shown: on these 2 cores ~1.5 "
            "means this job alone, 3 and more that other work shared them."
        ),
        "",
        "| model | dense nDCG@10 | default hybrid nDCG@10 | build chunks/s | load after build |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['model']} | {r['ndcg@10 dense']:.4f} | {r['ndcg@10 hybrid']:.4f} | {r['chunks_per_s']:.1f} | "
        f"{r['load_average_after']:.1f} |"
        for r in rows
    ]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
