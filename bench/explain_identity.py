"""Behaviour unchanged by a refactor: `explain` JSON of a fixed set of searches under many settings,
by this checkout and by another commit (a git worktree), on one index both can read.

Against a commit without the second stage, its own keys (`late_*`) are left out of the comparison
and the stage is off (`late_depth` 0) in every search, so what is compared is everything the first
stage and the steps after it report. `--with-late` (a commit that has the stage): the index stores
token vectors, the defaults run the stage, three more settings walk it, and every key is compared.
Prints one line per setting and exits 1 on any difference.

    python -m bench.explain_identity --before ee24b3d [--with-late] [--out reports/bench/DATE-explain-identity]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: settings that walk every step: fusions, modes, staged, feedback, rerank, grouping, filters, recency
SETTINGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "rrf": {"fusion": "rrf"},
    "dbsf": {"fusion": "dbsf"},
    "alpha 0.8": {"alpha": 0.8},
    "vector": {"mode": "vector"},
    "bm25": {"mode": "bm25"},
    "staged": {"staged": True, "candidates": 20},
    "feedback": {"feedback_weight": 0.5, "feedback_docs": 2},
    "chunks": {"group_by_document": False, "chunk_decay": 0.0},
    "recency": {"recency_weight": 0.3},
    "tags": {"tags": ["architecture", "rathole"], "tags_any": True},
    "rerank 10": {"rerank_depth": 10},
    "no adaptive": {"adaptive_fusion": False, "rare_term_max_df": 0},
}
#: with `--with-late`: the second stage's own settings (the defaults above run it too)
LATE_SETTINGS: dict[str, dict[str, Any]] = {
    "late rrf": {"late_combination": "rrf"},
    "late 40 w0.8": {"late_depth": 40, "late_weight": 0.8},
    "late + rerank": {"late_depth": 10, "rerank_depth": 5},
    "late bm25": {"mode": "bm25", "late_depth": 10},
}
QUERIES = [
    "how did I set up the VPN",
    "wireguard keepalive",
    "what is the current staging deploy key",
    "which notebook plots the benchmark",
    "backup schedule of the NAS last week",
]

WORKER = r"""
import json, sys
from hybridlab.search.engine import open_index
index = open_index(sys.argv[1])
settings, queries, keep_late = json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4] == "1"
out = {}
for name, options in settings.items():
    rows = []
    for q in queries:
        for r in index.search(q, explain=True, now="2026-11-01T00:00:00Z", **options):
            row = r.to_dict()
            if not keep_late:
                row["explain"] = {k: v for k, v in (row.get("explain") or {}).items() if not k.startswith("late_")}
            rows.append(row)
    out[name] = rows
print(json.dumps(out, sort_keys=True, default=str))
"""


def run(tree: Path, index_dir: Path, settings: dict[str, dict[str, Any]], keep_late: bool) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            WORKER,
            str(index_dir),
            json.dumps(settings),
            json.dumps(QUERIES),
            "1" if keep_late else "0",
        ],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--out", default=None)
    parser.add_argument("--with-late", action="store_true", help="both commits have the second stage")
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parents[1]
    from bench.late_latency import build, memories_and_questions

    memories, _ = memories_and_questions(None, 0)
    late = args.with_late
    settings = {**SETTINGS, **LATE_SETTINGS} if late else SETTINGS
    after_settings = (
        settings if late else {name: {**options, "late_depth": 0} for name, options in SETTINGS.items()}
    )
    with tempfile.TemporaryDirectory() as tmp:
        index_dir, _ = build(Path(tmp), memories, late=late)
        tree = Path(tmp) / "before"
        subprocess.run(
            ["git", "-C", str(here), "worktree", "add", "--detach", str(tree), args.before], check=True
        )
        try:
            before = run(tree, index_dir, settings, late)
        finally:
            subprocess.run(["git", "-C", str(here), "worktree", "remove", "--force", str(tree)], check=False)
        after = run(here, index_dir, after_settings, late)
    lines, same = [], True
    for name in settings:
        a = json.dumps(before[name], sort_keys=True, default=str)
        b = json.dumps(after[name], sort_keys=True, default=str)
        equal = a == b
        same &= equal
        digest = hashlib.sha256(b.encode()).hexdigest()[:12]
        lines.append(
            f"{'same' if equal else 'DIFF'}  {name:<12} {len(after[name]):>3} results  sha256 {digest}"
        )
    text = (
        f"explain JSON, {len(QUERIES)} queries x {len(settings)} settings, {args.before} vs this checkout "
        f"({'every key, the second stage on by default' if late else 'late_* keys left out'}):\n"
        + "\n".join(lines)
        + "\n"
    )
    print(text)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "README.md").write_text(
            f"```\n{text}```\n\nCommand: `python -m bench.explain_identity --before {args.before}{' --with-late' if late else ''}`\n"
        )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
