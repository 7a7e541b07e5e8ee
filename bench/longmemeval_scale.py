"""What a LongMemEval_S run costs here, on a synthetic file of its shape: 500 questions, each with
its own haystack of ~50 sessions (~10 turns, ~5 of them the user's, ~1,000 characters a turn) drawn
from a shared pool, so haystacks overlap heavily as in the published file (its fillers come from
ShareGPT/UltraChat pools); one evidence session per question.

    python -m bench.longmemeval_scale [--questions 40] [--full 500] [--out reports/bench/<date>-longmemeval-scale]

Runs `hybridlab membench longmemeval` (turn level, hybrid/bm25/vector) on the first N questions
of one synthetic file, from an empty work folder each time, and reports wall seconds split into
index builds (per haystack, embeddings through one cache: each distinct turn embedded once) and
searches; then extrapolates to `--full` questions from the largest run's per-haystack costs with the
embedding count of the full file. The turn texts are HoloViz sentences (../shared/corpora/holoviz),
so their lengths and vocabulary are real text's; the scores are not a LongMemEval result.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

from hybridlab.config import REPO_ROOT
from hybridlab.eval.evalsets import corpora_dir

TURN_CHARS = 1000


def texts(seed: int = 0) -> list[str]:
    """~1,000-character passages of HoloViz sentences."""
    out, current = [], ""
    for path in sorted((corpora_dir() / "holoviz").rglob("*.md")):
        body = re.sub(r"```.*?```", " ", path.read_text(encoding="utf-8", errors="replace"), flags=re.DOTALL)
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(body.split())):
            current = f"{current} {sentence}".strip()
            if len(current) >= TURN_CHARS:
                out.append(current[: 2 * TURN_CHARS])
                current = ""
    random.Random(seed).shuffle(out)
    return out


def synthetic(questions: int, sessions: int = 50, pool: int = 2500, seed: int = 0) -> list[dict[str, Any]]:
    """A LongMemEval_S-shaped list of questions (the official schema)."""
    rng = random.Random(seed)
    passages = texts(seed)

    def session(n: int) -> list[dict[str, Any]]:
        # two passages per turn, paired differently for every turn: distinct texts without repeats
        count = len(passages)
        return [
            {
                "role": "user" if t % 2 == 0 else "assistant",
                "content": passages[(n * 10 + t) % count][: TURN_CHARS // 2]
                + " "
                + passages[((n * 10 + t) * 7 + 3 + (n * 10 + t) // count) % count][: TURN_CHARS // 2],
            }
            for t in range(10)
        ]

    filler = {f"sharegpt_{n}": session(n) for n in range(pool)}
    entries = []
    for q in range(questions):
        answer_id = f"answer_{q}"
        answer = session(pool + q)
        answer[0] = {**answer[0], "has_answer": True}
        ids = rng.sample(sorted(filler), sessions - 1) + [answer_id]
        rng.shuffle(ids)
        entries.append(
            {
                "question_id": f"s{q:03d}",
                "question_type": "single-session-user",
                "question": " ".join(answer[0]["content"].split()[3:15]),
                "answer": "-",
                "question_date": "2023/06/01 (Thu) 10:00",
                "haystack_session_ids": ids,
                "haystack_dates": [f"2023/05/{1 + i % 28:02d} (Mon) 10:00" for i in range(len(ids))],
                "haystack_sessions": [answer if s == answer_id else filler[s] for s in ids],
                "answer_session_ids": [answer_id],
            }
        )
    return entries


def distinct_user_turns(entries: list[dict[str, Any]]) -> int:
    return len(
        {t["content"] for e in entries for s in e["haystack_sessions"] for t in s if t["role"] == "user"}
    )


def main(argv: list[str] | None = None) -> int:
    from hybridlab.eval.conversations import runner
    from hybridlab.eval.conversations.longmemeval import read_longmemeval

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--questions", default="40", help="comma-separated sizes (default 40: ~7,000 distinct turns to embed)"
    )
    parser.add_argument("--full", type=int, default=500)
    parser.add_argument(
        "--out", default=str(REPO_ROOT / "reports" / "bench" / f"{date.today()}-longmemeval-scale")
    )
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.questions.split(",")]
    full = synthetic(args.full)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hybridlab-lme-") as tmp:
        for n in sizes:
            work = Path(tmp) / f"work-{n}"
            path = Path(tmp) / f"lme-{n}.json"
            path.write_text(json.dumps(full[:n]), encoding="utf-8")
            haystacks = read_longmemeval(path)
            row: dict[str, Any] = {
                "questions": n,
                "haystack_turns": sum(len(h.turns) for h in haystacks),
                "distinct_turns_embedded": distinct_user_turns(full[:n]),
            }
            for state in (
                "cold",
                "warm",
            ):  # warm: the same haystacks again, embeddings cached, indexes rebuilt
                shutil.rmtree(work / "indexes", ignore_errors=True)
                started = time.perf_counter()
                result = runner.run_haystacks(
                    haystacks, runner.BenchSettings(scoring="longmemeval"), work, progress=False
                )
                row[f"{state}_wall_s"] = round(time.perf_counter() - started, 1)
                row[f"{state}_index_s"] = round(result.seconds["index"], 1)
                row["search_s"] = round(sum(v for k, v in result.seconds.items() if k != "index"), 1)
            table = runner.score(result, "session")
            row["hybrid_session_recall_any@5"] = round(table["hybrid"]["recall_any@5"]["all"]["mean"], 3)
            rows.append(row)
            print(row, flush=True)
    last = rows[-1]
    embed_per_turn = max(last["cold_index_s"] - last["warm_index_s"], 0.0) / last["distinct_turns_embedded"]
    build_per_haystack = last["warm_index_s"] / last["questions"]
    search_per_haystack = last["search_s"] / last["questions"]
    distinct_full = distinct_user_turns(full)
    estimate_s = args.full * (build_per_haystack + search_per_haystack) + embed_per_turn * distinct_full
    estimate = {
        "questions": args.full,
        "distinct_turns_embedded": distinct_full,
        "wall_s_estimate": round(estimate_s),
        "build_s_per_haystack": round(build_per_haystack, 3),
        "search_s_per_haystack": round(search_per_haystack, 3),
        "embed_s_per_distinct_turn": round(embed_per_turn, 4),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"runs": rows, "full": estimate}
    (out / "scale.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    lines = [
        f"# LongMemEval_S-shaped run, cost and scaling ({date.today()})",
        "",
        (
            "`python -m bench.longmemeval_scale` — synthetic file of LongMemEval_S's shape (50 sessions x 10 turns "
            "per question, fillers from a shared pool of 2,500 sessions); turn level; hybrid, BM25 and dense; "
            "an empty work folder per run; 2-core CPU."
        ),
        "",
        (
            "| questions | turns indexed (all haystacks) | distinct turns embedded | cold wall s | cold index s | "
            "warm wall s (embeddings cached) | warm index s | searches s |"
        ),
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['questions']} | {r['haystack_turns']:,} | {r['distinct_turns_embedded']:,} | {r['cold_wall_s']} | "
        f"{r['cold_index_s']} | {r['warm_wall_s']} | {r['warm_index_s']} | {r['search_s']} |"
        for r in rows
    ]
    lines += [
        "",
        (
            f"Full file ({args.full} questions, {distinct_full:,} distinct user turns): per haystack "
            f"{build_per_haystack:.2f} s to build (embeddings cached) + {search_per_haystack:.2f} s to search "
            f"(3 systems), {embed_per_turn * 1000:.0f} ms per distinct turn embedded: about "
            f"{estimate_s / 60:.0f} min here, linear in questions plus one embedding per distinct turn."
        ),
    ]
    (out / "scale.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
