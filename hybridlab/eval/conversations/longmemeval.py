"""LongMemEval (Wu et al., ICLR 2025; code github.com/xiaowu0162/LongMemEval, MIT; data on a model
hub: read from the path a user gives): `longmemeval_s.json`, `_m` and `_oracle`, one haystack per
question (~50 sessions in `_s`, shared between questions: their embeddings are computed once).

As the official retrieval code: only user turns are indexed (turn ids `<session>_<n>`, n counted
over all turns from 1), a session document is its user turns joined; evidence turns are the user
turns with `has_answer`, evidence sessions `answer_session_ids`; `_abs` questions are abstention
questions, left out of retrieval metrics."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybridlab.eval.conversations.records import BenchmarkFileError, Haystack, Question, Turn, read_json_list

_DATE_FORMATS = ("%Y/%m/%d (%a) %H:%M", "%Y/%m/%d %H:%M", "%Y/%m/%d")
FIELDS = (
    "question_id",
    "question_type",
    "question",
    "haystack_session_ids",
    "haystack_dates",
    "haystack_sessions",
    "answer_session_ids",
)


def parse_date(text: Any, where: str) -> datetime | None:
    """A LongMemEval date ("2023/05/20 (Sat) 02:21") as UTC; None when absent."""
    if not text:
        return None
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(str(text).strip(), fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise BenchmarkFileError(f"{where}: unreadable date {text!r}")


def read_longmemeval(path: str | Path) -> list[Haystack]:
    """One haystack per question of a LongMemEval file."""
    path = Path(path)
    data = read_json_list(path, "LongMemEval", "questions")
    return [_haystack(entry, f"{path}[{i}]") for i, entry in enumerate(data)]


def _haystack(entry: Any, where: str) -> Haystack:
    missing = [name for name in FIELDS if not isinstance(entry, dict) or name not in entry]
    if missing:
        raise BenchmarkFileError(f"{where}: missing field {missing[0]!r}")
    qid = str(entry["question_id"])
    ids, dates, sessions = entry["haystack_session_ids"], entry["haystack_dates"], entry["haystack_sessions"]
    if not len(ids) == len(dates) == len(sessions):
        raise BenchmarkFileError(
            f"{where}: haystack_session_ids, haystack_dates and haystack_sessions differ in length"
        )
    turns: list[Turn] = []
    session_dates: dict[str, datetime | None] = {}
    evidence_turns: list[str] = []
    for sid, date, session in zip(ids, dates, sessions):
        sid = str(sid)
        session_dates[sid] = when = parse_date(date, f"{where}.haystack_dates")
        previous = ""
        for n, turn in enumerate(session, start=1):
            if not isinstance(turn, dict) or "role" not in turn or "content" not in turn:
                raise BenchmarkFileError(
                    f"{where}.haystack_sessions[{sid}][{n - 1}]: a turn needs 'role' and 'content'"
                )
            text = str(turn["content"]).strip() or "[no text]"
            if turn["role"] == "user":
                turn_id = f"{sid}_{n}"
                turns.append(Turn(turn_id, sid, "user", text, when, previous))
                if turn.get("has_answer"):
                    evidence_turns.append(turn_id)
            previous = f"{turn['role']}: {text}"
    question = Question(
        qid,
        str(entry["question"]),
        str(entry["question_type"]),
        tuple(evidence_turns),
        tuple(str(s) for s in entry["answer_session_ids"]),
        parse_date(entry.get("question_date"), f"{where}.question_date"),
        qid.endswith("_abs"),
    )
    return Haystack(qid, tuple(turns), (question,), session_dates)
