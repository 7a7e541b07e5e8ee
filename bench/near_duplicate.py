"""Where to set the near-duplicate threshold of `store_memory` (issue 32): `python -m bench.near_duplicate
[--out DIR]`.

The 274 hand-written demo memories (`ground_truth/memories/memories.jsonl`) are all distinct: a
threshold that flags one of them as the near duplicate of another is a false alarm. Each memory's
content and tags are looked up as `store_memory` looks a new memory up
(:func:`hybridlab.search.listing.nearest_memory`: the cosine of the nearest memory's vector, embedded
as the index embeds memories, tags included, by the default model) in the index of the others (its own
document excluded), and in the full index as two light edits that are near duplicates by intent:
`dropped` (one word from the middle removed) and `extended` (" This still holds." appended).
Counts at 0.90/0.95/0.97/0.99 and the timing of the look-up go to
`reports/bench/<date>-near-duplicate/` (`--out`): `near_duplicate.json` and `README.md`.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import machine_info, percentile
from hybridlab.config import REPO_ROOT, apply_offline_environment

MEMORIES_FILE = REPO_ROOT / "ground_truth" / "memories" / "memories.jsonl"
THRESHOLDS = (0.90, 0.95, 0.97, 0.99)


def dropped(text: str) -> str:
    words = text.split()
    return " ".join(words[:len(words) // 2] + words[len(words) // 2 + 1:]) if len(words) > 3 else text + "!"


def run(work: Path) -> dict[str, Any]:
    from hybridlab.index.build import index_paths
    from hybridlab.search.engine import open_index
    from hybridlab.search.listing import nearest_memory

    memories = [json.loads(line) for line in MEMORIES_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
    index_paths([MEMORIES_FILE], work / "index", progress=False)
    index = open_index(work / "index")
    distinct, variants, seconds = [], {"dropped": [], "extended": []}, []
    for memory in memories:
        started = time.perf_counter()
        found = nearest_memory(index, memory["content"], memory.get("tags") or (), exclude=memory["id"])
        seconds.append(time.perf_counter() - started)
        distinct.append({"id": memory["id"], "nearest": found and found[0], "cosine": found and round(found[1], 4)})
        for kind, text in (("dropped", dropped(memory["content"])), ("extended", memory["content"] + " This still holds.")):
            found = nearest_memory(index, text, memory.get("tags") or ())
            variants[kind].append(found[1] if found and found[0] == memory["id"] else 0.0)
    index.close()
    cosines = [d["cosine"] or 0.0 for d in distinct]
    return {
        "memories": len(memories),
        "false_alarms": {f"{t:.2f}": sum(c >= t for c in cosines) for t in THRESHOLDS},
        "caught": {kind: {f"{t:.2f}": sum(c >= t for c in values) for t in THRESHOLDS} for kind, values in variants.items()},
        "nearest_cosine": {"max": max(cosines), "p99": round(percentile(cosines, 99), 4), "p50": round(percentile(cosines, 50), 4)},
        "variant_cosine_p50": {kind: round(percentile(values, 50), 4) for kind, values in variants.items()},
        "lookup_ms": {"p50": round(1000 * percentile(seconds, 50), 2), "p95": round(1000 * percentile(seconds, 95), 2)},
        "closest_pairs": sorted(distinct, key=lambda d: -(d["cosine"] or 0))[:5],
    }


def readme(result: dict[str, Any]) -> str:
    rows = "\n".join(f"| {t:.2f} | {result['false_alarms'][f'{t:.2f}']} | {result['caught']['dropped'][f'{t:.2f}']} "
                     f"| {result['caught']['extended'][f'{t:.2f}']} |" for t in THRESHOLDS)
    pairs = "\n".join(f"- {p['id']} ~ {p['nearest']}: {p['cosine']}" for p in result["closest_pairs"])
    return f"""# Near-duplicate threshold on the demo memories ({result['date']})

`{result['command']}` ({result['seconds']} s). {result['memories']} distinct memories; each looked up in the
index of the others (false alarms), and two light edits of each in the full index (caught: the
edit's nearest memory is its original at or above the threshold).

| threshold | distinct memories flagged | one word dropped caught | sentence appended caught |
|---|---|---|---|
{rows}

Nearest other memory's cosine: max {result['nearest_cosine']['max']}, p99 {result['nearest_cosine']['p99']},
p50 {result['nearest_cosine']['p50']}. Edits' cosine to their original, p50: {result['variant_cosine_p50']}.
Look-up (query embedding + vector search): p50 {result['lookup_ms']['p50']} ms, p95 {result['lookup_ms']['p95']} ms.

Closest distinct pairs:
{pairs}

Decision (`hybridlab/server/mcp.py` NEAR_THRESHOLD): on by default at 0.95, report only (the store
still happens unless `skip_near_duplicate`): no distinct demo memory reaches it, most light edits do;
0.90 flags distinct memories, 0.99 misses a third of the edits.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.near_duplicate", description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="output folder (default reports/bench/<date>-near-duplicate)")
    args = parser.parse_args(argv)
    apply_offline_environment()
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    out = Path(args.out) if args.out else REPO_ROOT / "reports" / "bench" / f"{date}-near-duplicate"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hybridlab-near-") as work:
        result = run(Path(work))
    result.update(date=date, command="python -m bench.near_duplicate " + shlex.join(argv or sys.argv[1:]),
                  seconds=round(time.perf_counter() - started, 1), machine=machine_info())
    out.mkdir(parents=True, exist_ok=True)
    (out / "near_duplicate.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(readme(result), encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("false_alarms", "caught", "nearest_cosine", "lookup_ms")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
