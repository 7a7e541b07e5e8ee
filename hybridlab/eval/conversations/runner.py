"""Per-haystack evaluation: each haystack indexed on its own (its own BM25 statistics; embeddings
shared through one embeddings cache), each of its questions searched by every system, the runs
scored with the benchmark's metrics per category, with n, and written as TREC files."""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridlab import __version__
from hybridlab.config import IndexConfig
from hybridlab.errors import InvalidValueError
from hybridlab.eval.conversations import metrics
from hybridlab.eval.conversations.records import GRANULARITIES, Haystack, Question
from hybridlab.eval.evaluate import write_trec_run
from hybridlab.index.write.build import index_paths
from hybridlab.search.engine import Index

#: system name -> search options (on top of the config file's)
SYSTEMS: dict[str, dict[str, Any]] = {"hybrid": {}, "bm25": {"mode": "bm25"}, "vector": {"mode": "vector"}}
KS = (5, 10, 25, 50)
ALL = "all"
Ranked = dict[str, list[str]]  # qid -> ids best first


@dataclass(frozen=True)
class BenchSettings:
    """What one benchmark run does: the granularity documents are indexed at, the systems, the
    depth searched, the search options every system gets, the index config, whether a turn is
    indexed with the turn before it, and the metric family (`locomo` or `longmemeval`)."""

    granularity: str = "turn"
    systems: tuple[str, ...] = ("hybrid", "bm25", "vector")
    depth: int = 50
    options: Mapping[str, Any] = field(default_factory=dict)
    index_config: IndexConfig = field(default_factory=IndexConfig)
    context: bool = True
    scoring: str = "locomo"

    def __post_init__(self) -> None:
        if self.granularity not in GRANULARITIES:
            raise InvalidValueError(
                f"unknown granularity {self.granularity!r}; choose from {list(GRANULARITIES)}"
            )
        unknown = [s for s in self.systems if s not in SYSTEMS]
        if unknown:
            raise InvalidValueError(f"unknown system {unknown[0]!r}; choose from {sorted(SYSTEMS)}")


@dataclass
class BenchResult:
    """Rankings per system (qid -> ids, best first), the questions, how long it took."""

    settings: BenchSettings
    rankings: dict[str, Ranked]
    questions: dict[str, Question]
    session_of: dict[str, str]  # turn id (qualified by haystack) -> session id
    session_turns: dict[str, int]  # session id (qualified) -> turns in it
    seconds: dict[str, float]


def qualified(haystack: Haystack, item: str) -> str:
    """An id unique across haystacks (LoCoMo's `D1:3` repeats in every conversation)."""
    return f"{haystack.haystack_id}/{item}"


#: bumped when what an index of the same memories holds changes (so cached haystack indexes are rebuilt)
INDEX_KEY_VERSION = 2


def haystack_key(memories: list[dict[str, Any]], settings: BenchSettings) -> str:
    text = json.dumps(
        [INDEX_KEY_VERSION, __version__, memories, settings.index_config.to_dict()],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def build_index(haystack: Haystack, settings: BenchSettings, work: Path, cache: Path) -> Path:
    """The haystack's index (reused when one of the same memories and config exists under `work`)."""
    memories = haystack.memories(settings.granularity, settings.context)
    folder = work / f"{haystack_key(memories, settings)}"
    done = folder / "built.ok"
    if done.exists():
        return folder / "index"
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "memories.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in memories), encoding="utf-8")
    index_paths([source], folder / "index", settings.index_config, progress=False, cache_path=cache)
    done.write_text("")
    return folder / "index"


def run_haystacks(
    haystacks: Sequence[Haystack],
    settings: BenchSettings,
    work: str | Path,
    *,
    progress: bool = True,
    search: Callable[..., Any] | None = None,
) -> BenchResult:
    """Index every haystack, search each of its questions with every system (`depth` results)."""
    from tqdm.auto import tqdm

    work = Path(work)
    cache = work / "embeddings.duckdb"
    rankings: dict[str, Ranked] = {system: {} for system in settings.systems}
    questions: dict[str, Question] = {}
    seconds: dict[str, float] = defaultdict(float)
    session_of, session_turns = sessions_of(haystacks)
    bar = tqdm(haystacks, desc=f"haystacks ({settings.granularity})", unit="haystack", disable=not progress)
    for haystack in bar:
        started = time.perf_counter()
        folder = build_index(haystack, settings, work / "indexes", cache)
        seconds["index"] += time.perf_counter() - started
        with Index(folder) as index:
            for question in haystack.questions:
                questions[question.question_id] = question
                now = question.date or haystack.last_date
                for system in settings.systems:
                    started = time.perf_counter()
                    options = {**settings.options, **SYSTEMS[system], "limit": settings.depth}
                    run = index.run(question.text, now=now, **options)
                    seconds[system] += time.perf_counter() - started
                    rankings[system][question.question_id] = [qualified(haystack, d) for d in run]
    return BenchResult(settings, rankings, questions, session_of, session_turns, dict(seconds))


def sessions_of(haystacks: Iterable[Haystack]) -> tuple[dict[str, str], dict[str, int]]:
    """(qualified turn id -> its qualified session id, qualified session id -> its turns): how a
    turn-level ranking is scored at the session level."""
    session_of: dict[str, str] = {}
    counts: dict[str, int] = defaultdict(int)
    for haystack in haystacks:
        for turn in haystack.turns:
            session = qualified(haystack, turn.session_id)
            session_of[qualified(haystack, turn.turn_id)] = session
            counts[session] += 1
    return session_of, dict(counts)


# ------------------------------------------------------------------------------------ scoring
def relevant_ids(result: BenchResult, qid: str, level: str) -> list[str]:
    question = result.questions[qid]
    prefix = qid.rsplit("-q", 1)[0] if result.settings.scoring == "locomo" else qid
    items = question.evidence_turns if level == "turn" else question.evidence_sessions
    return [f"{prefix}/{item}" for item in items]


def ranked_at(result: BenchResult, system: str, qid: str, level: str, k: int) -> list[str]:
    """The ranking a metric at `level` reads: as searched, or turns mapped to their sessions."""
    ranked = result.rankings[system][qid]
    if level == result.settings.granularity:
        return ranked
    if level == "session" and result.settings.granularity == "turn":
        if result.settings.scoring == "locomo":
            return metrics.unique([result.session_of.get(t, t) for t in ranked])
        return metrics.to_sessions(ranked, result.session_of, k)
    raise InvalidValueError(f"a {result.settings.granularity}-level run cannot be scored at {level} level")


def score(result: BenchResult, level: str | None = None, ks: Sequence[int] = KS) -> dict[str, Any]:
    """Per system, metric@k, and category: the mean and n. LoCoMo: `recall` (fractional) and
    `recall_any`; LongMemEval: `recall_any`, `recall_all`, `ndcg_any` (abstention left out)."""
    level = level or result.settings.granularity
    names = (
        ("recall", "recall_any")
        if result.settings.scoring == "locomo"
        else ("recall_any", "recall_all", "ndcg_any")
    )
    table: dict[str, Any] = {}
    for system in result.settings.systems:
        sums: dict[tuple[str, int, str], list[float]] = defaultdict(list)
        for qid, question in result.questions.items():
            relevant = relevant_ids(result, qid, level)
            if not relevant or question.abstention:
                continue
            for k in ks:
                ranked = ranked_at(result, system, qid, level, k)
                for name in names:
                    if name == "ndcg_any" and level == "session" and result.settings.granularity == "turn":
                        present = sum(result.session_turns.get(s, 0) for s in relevant)
                        value = metrics.ndcg_any(ranked, relevant, len(ranked), present)
                    else:
                        value = metrics.METRICS[name](
                            ranked,
                            relevant,
                            k
                            if level == result.settings.granularity or result.settings.scoring == "locomo"
                            else len(ranked),
                        )
                    for category in (ALL, question.category):
                        sums[(name, k, category)].append(value)
                    if result.settings.scoring == "locomo" and question.category != "adversarial":
                        sums[(name, k, "all-but-adversarial")].append(value)
        table[system] = {
            f"{name}@{k}": {
                cat: {"mean": sum(v) / len(v), "n": len(v)}
                for (n2, k2, cat), v in sorted(sums.items())
                if (n2, k2) == (name, k)
            }
            for name in names
            for k in ks
        }
    return table


def _rank_scored(rankings: Mapping[str, Sequence[str]]) -> dict[str, dict[str, float]]:
    """Rankings as a run whose scores follow the ranks (n for the first of n, ... 1 for the last)."""
    return {
        qid: {doc: float(len(ranked) - i) for i, doc in enumerate(ranked)} for qid, ranked in rankings.items()
    }


def write_outputs(result: BenchResult, out: str | Path, levels: Sequence[str]) -> dict[str, Any]:
    """TREC runs and qrels per level (a turn run also as its sessions, `*-turn-as-sessions.trec`: what
    `fuse` combines with a session run), `summary.json` and `summary.md`; returns the summary."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    gran = result.settings.granularity
    for system in result.settings.systems:
        run = _rank_scored(result.rankings[system])
        write_trec_run(run, out / f"{system}-{gran}.trec", name=f"hybridlab-{system}")
        if gran == "turn" and "session" in levels:  # the same run with its turns mapped to their sessions
            mapped = {qid: ranked_at(result, system, qid, "session", result.settings.depth) for qid in run}
            write_trec_run(
                _rank_scored(mapped),
                out / f"{system}-turn-as-sessions.trec",
                name=f"hybridlab-{system}-turns",
            )
    for level in levels:
        lines = [
            f"{qid} 0 {doc} 1\n"
            for qid in result.questions
            for doc in relevant_ids(result, qid, level)
            if not result.questions[qid].abstention
        ]
        (out / f"qrels-{level}.txt").write_text("".join(lines), encoding="utf-8")
    summary = {
        "settings": {
            "granularity": gran,
            "systems": list(result.settings.systems),
            "depth": result.settings.depth,
            "options": dict(result.settings.options),
            "context": result.settings.context,
            "models": list(result.settings.index_config.models),
            "scoring": result.settings.scoring,
        },
        "seconds": {k: round(v, 2) for k, v in result.seconds.items()},
        "questions": len(result.questions),
        "levels": {level: score(result, level) for level in levels},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    (out / "summary.md").write_text(to_markdown(summary), encoding="utf-8")
    return summary


def to_markdown(summary: Mapping[str, Any], ks: Sequence[int] = KS) -> str:
    """One table per level and metric: systems by k (all questions), then per category at k=5 and 10."""
    lines = [
        f"# Memory benchmark ({summary['settings']['scoring']}, indexed by {summary['settings']['granularity']})",
        "",
        f"settings: `{json.dumps(summary['settings'])}`",
        f"seconds: `{json.dumps(summary['seconds'])}`",
        "",
    ]
    for level, table in summary["levels"].items():
        systems = list(table)
        names = sorted({key.split("@")[0] for key in table[systems[0]]})
        for name in names:
            lines += [
                f"## {level} level, {name}",
                "",
                "| system | " + " | ".join(f"@{k}" for k in ks) + " | n |",
                "|---|" + "---|" * (len(ks) + 1),
            ]
            for system in systems:
                cells = [100 * table[system][f"{name}@{k}"][ALL]["mean"] for k in ks]
                n = table[system][f"{name}@{ks[0]}"][ALL]["n"]
                lines.append(f"| {system} | " + " | ".join(f"{c:.1f}" for c in cells) + f" | {n} |")
            categories = [c for c in table[systems[0]][f"{name}@{ks[0]}"] if c != ALL]
            lines += [
                "",
                f"per category, {name}@5 / @10 (n):",
                "",
                "| category | n | " + " | ".join(systems) + " |",
                "|---|---|" + "---|" * len(systems),
            ]
            for cat in categories:
                n = table[systems[0]][f"{name}@{ks[0]}"][cat]["n"]
                cells = [
                    f"{100 * table[s][f'{name}@5'][cat]['mean']:.1f} / {100 * table[s][f'{name}@10'][cat]['mean']:.1f}"
                    for s in systems
                ]
                lines.append(f"| {cat} | {n} | " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines) + "\n"
