"""Where to set the near-duplicate threshold of `store_memory` (issue 32): `python -m bench.near_duplicate
[--out DIR]`.

The 274 hand-written demo memories (`ground_truth/memories/memories.jsonl`) are all distinct: a
threshold that flags one of them as the near duplicate of another is a false alarm. Each memory's
content and tags are looked up as `store_memory` looks a new memory up
(:func:`hybridlab.search.listing.nearest_memory` over the vectors of
:meth:`hybridlab.index.write.memory.MemoryWriter.embed`: the cosine of the nearest memory's vector, the new
one embedded as the index embeds memories, as a document, tags included) in the index of the others (its
own document excluded), and in the full index as two light edits that are near duplicates by intent:
`dropped` (one word from the middle removed) and `extended` (" This still holds." appended).
Counts at 0.90/0.95/0.97/0.99 and the timing of the look-up go to
`reports/bench/<date>-near-duplicate/` (`--out`): `near_duplicate.json` and `README.md`.

`same_decision` (issue 40) checks that embedding the text once, as a document (the vectors the log
then records), decides as the look-up before it did, which embedded the same text as a query: each
look-up is made both ways, and the decisions (nearest memory, at or above each threshold) compared.
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
    return " ".join(words[: len(words) // 2] + words[len(words) // 2 + 1 :]) if len(words) > 3 else text + "!"


def run(work: Path) -> dict[str, Any]:
    from hybridlab.index.format.rows import chunk_document, indexed_text
    from hybridlab.index.write.build import index_paths
    from hybridlab.index.write.memory import MemoryWriter, make_memory
    from hybridlab.search.engine import open_index
    from hybridlab.search.listing import nearest_memory

    memories = [
        json.loads(line) for line in MEMORIES_FILE.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    index_paths([MEMORIES_FILE], work / "index", progress=False)
    index = open_index(work / "index")
    writer = MemoryWriter(work / "index")
    pairs: list[tuple[Any, Any]] = []  # (as a document, as a query) of every look-up
    seconds: list[float] = []  # of the look-ups of distinct memories, as store_memory makes them

    def lookup(text: str, tags: list[str], exclude: str | None = None) -> Any:
        started = time.perf_counter()
        memory = writer.embed(make_memory(text, tags))
        found = nearest_memory(index.snapshot(), memory.vectors, exclude=exclude)
        if exclude is not None:
            seconds.append(time.perf_counter() - started)
        model = next(iter(memory.vectors))  # before issue 40: the same text embedded as a query
        chunk = chunk_document(memory.document, memory.config)[0]
        query = index.query_models.query_vector(
            index.snapshot(), model, indexed_text(chunk, memory.document, memory.config.chunk)
        )
        pairs.append((found, nearest_memory(index.snapshot(), {model: query}, exclude=exclude)))
        return found

    distinct, variants = [], {"dropped": [], "extended": []}
    for memory in memories:
        tags = memory.get("tags") or []
        found = lookup(memory["content"], tags, exclude=memory["id"])
        distinct.append(
            {
                "id": memory["id"],
                "nearest": found and found.doc_id,
                "cosine": found and round(found.similarity, 4),
            }
        )
        for kind, text in (
            ("dropped", dropped(memory["content"])),
            ("extended", memory["content"] + " This still holds."),
        ):
            found = lookup(text, tags)
            variants[kind].append(found.similarity if found and found.doc_id == memory["id"] else 0.0)
    writer.close()
    index.close()
    cosines = [d["cosine"] or 0.0 for d in distinct]
    return {
        "memories": len(memories),
        "false_alarms": {f"{t:.2f}": sum(c >= t for c in cosines) for t in THRESHOLDS},
        "caught": {
            kind: {f"{t:.2f}": sum(c >= t for c in values) for t in THRESHOLDS}
            for kind, values in variants.items()
        },
        "nearest_cosine": {
            "max": max(cosines),
            "p99": round(percentile(cosines, 99), 4),
            "p50": round(percentile(cosines, 50), 4),
        },
        "variant_cosine_p50": {kind: round(percentile(values, 50), 4) for kind, values in variants.items()},
        "lookup_ms": {
            "p50": round(1000 * percentile(seconds, 50), 2),
            "p95": round(1000 * percentile(seconds, 95), 2),
        },
        "closest_pairs": sorted(distinct, key=lambda d: -(d["cosine"] or 0))[:5],
        "same_decision": same_decision(pairs),
    }


def same_decision(pairs: list[tuple[Any, Any]]) -> dict[str, Any]:
    """Look-ups whose decision (the nearest memory, and whether it reaches each threshold) is the
    same with the text embedded as a document and as a query; the largest cosine difference."""

    def decision(found: Any, threshold: float) -> tuple[str | None, bool]:
        return (found and found.doc_id, bool(found and found.similarity >= threshold))

    return {
        "lookups": len(pairs),
        "same": {f"{t:.2f}": sum(decision(d, t) == decision(q, t) for d, q in pairs) for t in THRESHOLDS},
        "max_cosine_difference": max(
            (abs(d.similarity - q.similarity) for d, q in pairs if d and q), default=0.0
        ),
    }


def readme(result: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {t:.2f} | {result['false_alarms'][f'{t:.2f}']} | {result['caught']['dropped'][f'{t:.2f}']} "
        f"| {result['caught']['extended'][f'{t:.2f}']} |"
        for t in THRESHOLDS
    )
    pairs = "\n".join(f"- {p['id']} ~ {p['nearest']}: {p['cosine']}" for p in result["closest_pairs"])
    return f"""# Near-duplicate threshold on the demo memories ({result["date"]})

`{result["command"]}` ({result["seconds"]} s). {result["memories"]} distinct memories; each looked up in the
index of the others (false alarms), and two light edits of each in the full index (caught: the
edit's nearest memory is its original at or above the threshold).

| threshold | distinct memories flagged | one word dropped caught | sentence appended caught |
|---|---|---|---|
{rows}

Nearest other memory's cosine: max {result["nearest_cosine"]["max"]}, p99 {result["nearest_cosine"]["p99"]},
p50 {result["nearest_cosine"]["p50"]}. Edits' cosine to their original, p50: {result["variant_cosine_p50"]}.
Look-up (document embedding + vector search): p50 {result["lookup_ms"]["p50"]} ms, p95 {result["lookup_ms"]["p95"]} ms.

The text embedded once, as a document (the vectors the write-ahead log records), against the same
text embedded as a query (the look-up before issue 40): of {result["same_decision"]["lookups"]} look-ups,
the same decision at each threshold: {result["same_decision"]["same"]}; largest cosine difference
{result["same_decision"]["max_cosine_difference"]:.2e}.

Closest distinct pairs:
{pairs}

Decision (`hybridlab/server/mcp.py` NEAR_THRESHOLD): on by default at 0.95, report only (the store
still happens unless `skip_near_duplicate`): no distinct demo memory reaches it, most light edits do;
0.90 flags distinct memories, 0.99 misses a third of the edits.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.near_duplicate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", help="output folder (default reports/bench/<date>-near-duplicate)")
    args = parser.parse_args(argv)
    apply_offline_environment()
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    out = Path(args.out) if args.out else REPO_ROOT / "reports" / "bench" / f"{date}-near-duplicate"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hybridlab-near-") as work:
        result = run(Path(work))
    result.update(
        date=date,
        command="python -m bench.near_duplicate " + shlex.join(argv or sys.argv[1:]),
        seconds=round(time.perf_counter() - started, 1),
        machine=machine_info(),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "near_duplicate.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "README.md").write_text(readme(result), encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("false_alarms", "caught", "nearest_cosine", "lookup_ms")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
