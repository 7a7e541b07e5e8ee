"""Read-your-write by rare words (issue 28, item 6): `python -m bench.rare_word [--memories N]
[--stores S] [--out DIR]`.

A memory index of N synthetic memories (default 20,000), then S stores (default 500) through
`MemoryWriter`, each memory holding a random token no other memory holds; right after each store
the token alone is searched with the default hybrid, with the rare-term lift (the default,
`rare_term_max_df` 3) and without it (`rare_term_max_df=0`: the engine before), and BM25 alone; the
rank of the stored memory in each (None = not in the top 10) is recorded.

- Memories: sentences of `ground_truth/memories/memories.jsonl` (274 hand-written memories)
  recombined, 1-3 per memory, with 0-2 of its tags and a creation date in the two years before
  `NOW`; embedded with the default model (all-MiniLM-L6-v2), so the dense side is the real one.
  The embeddings cache is `.cache/bench-rare-word/embeddings.duckdb` (a second run embeds nothing
  of the base index).
- Stored memories: built the same way, the token put at a random place among their words; its
  form is one of a random lowercase word (7-10 letters), letters and digits (`k7qzv2mx`), a
  snake_case identifier (`blorp_quix_42`) or a dashed one (`zevo-3318`). A token is used only
  when none of its terms is in the index yet. Stores are made with the default write path
  (write-ahead log folded every 64 stores), dated now, as a user's store is.

Results go to `reports/bench/<date>-rare-word/` (`--out`): `rare_word.json` (every store: token,
ranks, the rule-off explain of the stored memory where it was not first) and `README.md`.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import shlex
import string
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import machine_info, percentile
from hybridlab.config import REPO_ROOT, apply_offline_environment

MEMORIES_FILE = REPO_ROOT / "ground_truth" / "memories" / "memories.jsonl"
CACHE = REPO_ROOT / ".cache" / "bench-rare-word" / "embeddings.duckdb"
LIMIT = 10
SYLLABLES = (
    "bl",
    "qu",
    "zev",
    "or",
    "ix",
    "vra",
    "mok",
    "tul",
    "yss",
    "krem",
    "dro",
    "pif",
    "gax",
    "wen",
    "sol",
)
EXPLAIN_KEYS = (
    "dense_rank",
    "dense_score",
    "bm25_rank",
    "alpha",
    "fused_score",
    "final_score",
    "recency_factor",
    "lexical_evidence",
    "rare_term",
    "rare_term_df",
    "mode",
)


def sentence_pool(path: Path = MEMORIES_FILE) -> tuple[list[str], list[str]]:
    """The sentences of the memories file and its distinct tags."""
    sentences, tags = [], set()
    for line in path.read_text(encoding="utf-8").splitlines():
        memory = json.loads(line)
        sentences += [s.strip() for s in re.split(r"(?<=[.!?])\s+", memory["content"]) if len(s.strip()) > 15]
        tags.update(memory.get("tags") or ())
    return sentences, sorted(tags)


def synthetic_memory(rng: random.Random, sentences: list[str], tags: list[str]) -> tuple[str, list[str]]:
    """1-3 sentences of the pool and 0-2 of its tags."""
    return " ".join(rng.sample(sentences, rng.randint(1, 3))), rng.sample(tags, rng.randint(0, 2))


def random_token(rng: random.Random) -> str:
    """A token in one of four forms (see the module docstring)."""
    form = rng.randrange(4)
    if form == 0:
        return "".join(rng.choices(string.ascii_lowercase, k=rng.randint(7, 10)))
    if form == 1:
        return "".join(rng.choices(string.ascii_lowercase + string.digits, k=8))
    if form == 2:
        return "_".join("".join(rng.sample(SYLLABLES, 2)) for _ in range(2)) + f"_{rng.randint(10, 99)}"
    return "".join(rng.sample(SYLLABLES, 2)) + f"-{rng.randint(1000, 9999)}"


def with_token(rng: random.Random, text: str, token: str) -> str:
    """`text` with `token` put between two of its words (or at either end)."""
    words = text.split()
    words.insert(rng.randint(0, len(words)), token)
    return " ".join(words)


def rank_of(results: list[Any], doc_id: str) -> int | None:
    return next((r.rank for r in results if r.doc_id == doc_id), None)


def build_base(index_dir: Path, n: int, rng: random.Random, sentences: list[str], tags: list[str]) -> float:
    """Index `n` synthetic memories with the default config; seconds it took."""
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import apply_changes
    from hybridlab.index.write.memory import MEMORY_SOURCE, make_memory

    now = datetime.now(UTC)
    documents = []
    for i in range(n):
        text, memory_tags = synthetic_memory(rng, sentences, tags)
        when = (now - timedelta(minutes=rng.randint(60, 2 * 365 * 24 * 60))).strftime("%Y-%m-%dT%H:%M:%SZ")
        documents.append(make_memory(text, memory_tags, created_at=when, memory_id=f"base-{i:06d}"))
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    apply_changes(
        index_dir, [(MEMORY_SOURCE, documents, False)], IndexConfig(), progress=True, cache_path=CACHE
    )
    return time.perf_counter() - started


def run(n: int, stores: int, seed: int, work: Path) -> dict[str, Any]:
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    rng = random.Random(seed)
    sentences, tags = sentence_pool()
    index_dir = work / "index"
    build_seconds = build_base(index_dir, n, rng, sentences, tags)
    index = open_index(index_dir)
    writer = MemoryWriter(index_dir)
    records = []
    try:
        for i in range(stores):
            token = random_token(rng)
            while index.snapshot().generation.sparse.query_terms(
                token
            ):  # some term of it is in the index already
                token = random_token(rng)
            text, memory_tags = synthetic_memory(rng, sentences, tags)
            started = time.perf_counter()
            memory = writer.store(with_token(rng, text, token), memory_tags)
            store_s = time.perf_counter() - started
            started = time.perf_counter()
            after = index.search(token, limit=LIMIT, explain=True)
            search_s = time.perf_counter() - started
            before = index.search(token, limit=LIMIT, rare_term_max_df=0, explain=True)
            bm25 = index.search(token, limit=LIMIT, mode="bm25")
            record = {
                "store": i,
                "token": token,
                "memory": memory.id,
                "rank_after": rank_of(after, memory.id),
                "rank_before": rank_of(before, memory.id),
                "rank_bm25": rank_of(bm25, memory.id),
                "store_s": round(store_s, 4),
                "search_s": round(search_s, 4),
                "rare_term": after[0].explain["rare_term"] if after else None,
                "rare_term_df": after[0].explain["rare_term_df"] if after else None,
            }
            if record["rank_before"] != 1:
                hit = next((r for r in before if r.doc_id == memory.id), None)
                record["before_explain"] = {key: hit.explain[key] for key in EXPLAIN_KEYS} if hit else None
                record["before_first"] = (
                    {key: before[0].explain[key] for key in EXPLAIN_KEYS} if before else None
                )
            records.append(record)
            if (i + 1) % 50 == 0:
                print(
                    f"{i + 1} stores: rank 1 after {sum(r['rank_after'] == 1 for r in records)}, "
                    f"before {sum(r['rank_before'] == 1 for r in records)}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        writer.close()
        index.close()
    return {
        "memories": n,
        "stores": stores,
        "seed": seed,
        "build_seconds": round(build_seconds, 1),
        "records": records,
        "summary": summarize(records),
    }


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per side: stores found at rank 1, at ranks 2-10, not in the top 10; search and store times."""
    summary: dict[str, Any] = {}
    for side in ("after", "before", "bm25"):
        ranks = [r[f"rank_{side}"] for r in records]
        summary[side] = {
            "rank_1": sum(rank == 1 for rank in ranks),
            "rank_2_10": sum(rank is not None and rank > 1 for rank in ranks),
            "missing": sum(rank is None for rank in ranks),
            "worst": max((rank for rank in ranks if rank is not None), default=None),
        }
    for key in ("store_s", "search_s"):
        values = [r[key] for r in records]
        summary[key] = {"p50": round(percentile(values, 50), 4), "p95": round(percentile(values, 95), 4)}
    summary["rare_term_df"] = sorted({r["rare_term_df"] for r in records if r["rare_term_df"] is not None})
    return summary


def readme(result: dict[str, Any], command: str) -> str:
    s = result["summary"]
    rows = "\n".join(
        f"| {name} | {s[side]['rank_1']} | {s[side]['rank_2_10']} | {s[side]['missing']} |"
        for name, side in (
            ("default hybrid, rare-term lift (after)", "after"),
            ("default hybrid, `rare_term_max_df=0` (before)", "before"),
            ("BM25 alone", "bm25"),
        )
    )
    misses = [r for r in result["records"] if r["rank_before"] != 1 or r["rank_after"] != 1]
    lines = (
        "\n".join(
            f"| {r['store']} | `{r['token']}` | {r['rank_before']} | {r['rank_after']} | "
            f"{(r.get('before_explain') or {}).get('dense_rank')} |"
            for r in misses
        )
        or "| - | - | - | - | - |"
    )
    return f"""# Read-your-write by rare words ({result["date"]})

`{command}` ({result["seconds"]:.0f} s; base index built in {result["build_seconds"]:.0f} s).

{result["memories"]:,} synthetic memories (sentences of `ground_truth/memories` recombined, default model
all-MiniLM-L6-v2), then {result["stores"]} stores through `MemoryWriter`, each holding a random token no
other memory holds; right after each store the token alone is searched (limit {LIMIT}). Rank of the
stored memory, stores counted:

| search | rank 1 | rank 2-10 | not in top 10 |
|---|---:|---:|---:|
{rows}

Stores where either side missed rank 1 (dense rank of the memory without the lift):

| store | token | rank before | rank after | dense rank |
|---|---|---:|---:|---:|
{lines}

Store P50/P95 {s["store_s"]["p50"]:.3f} / {s["store_s"]["p95"]:.3f} s; search right after it (explain on)
P50/P95 {s["search_s"]["p50"] * 1000:.1f} / {s["search_s"]["p95"] * 1000:.1f} ms. Document frequency of the
token's rarest term at search time: {s["rare_term_df"]}. Machine: {result["machine"].get("cpu_model", "?")}.
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.rare_word", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--memories", type=int, default=20_000, help="memories in the base index (default 20000)"
    )
    parser.add_argument(
        "--stores", type=int, default=500, help="stores, each searched right after (default 500)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="output folder (default reports/bench/<date>-rare-word)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    apply_offline_environment()
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    out = Path(args.out) if args.out else REPO_ROOT / "reports" / "bench" / f"{date}-rare-word"
    command = "python -m bench.rare_word " + shlex.join(sys.argv[1:] if argv is None else argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hybridlab-bench-rare-word-") as work:
        result = run(args.memories, args.stores, args.seed, Path(work))
    result.update(
        date=date, command=command, seconds=round(time.perf_counter() - started, 1), machine=machine_info()
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "rare_word.json").write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    (out / "README.md").write_text(readme(result, command), encoding="utf-8")
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
