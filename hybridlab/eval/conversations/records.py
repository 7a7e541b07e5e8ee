"""The typed records both benchmarks read into: turns of sessions, questions with their evidence,
and haystacks (what one question is ranked against)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hybridlab.errors import HybridlabError, InvalidValueError

GRANULARITIES = ("turn", "session")


class BenchmarkFileError(HybridlabError, ValueError):
    """A benchmark file that is not in its published form (names the file and the field)."""


def read_json_list(path: Path, benchmark: str, items: str) -> list[Any]:
    """A benchmark file's top-level JSON list (of conversations, of questions)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise BenchmarkFileError(f"{path}: not a readable {benchmark} JSON file ({error})") from error
    if not isinstance(data, list):
        raise BenchmarkFileError(f"{path}: expected a list of {items}, got {type(data).__name__}")
    return data


@dataclass(frozen=True)
class Turn:
    """One utterance: its id (LoCoMo `D1:3`; LongMemEval `<session>_<n>`), session id, speaker,
    text, the session's date, and the turn before it in the same session (its context)."""

    turn_id: str
    session_id: str
    speaker: str
    text: str
    date: datetime | None
    previous: str = ""  # "Speaker: text" of the turn before, "" for a session's first turn


@dataclass(frozen=True)
class Question:
    """A question with its evidence (turn ids and session ids), category and reference time.
    `abstention`: LongMemEval's `_abs` questions (left out of retrieval metrics, as published)."""

    question_id: str
    text: str
    category: str
    evidence_turns: tuple[str, ...]
    evidence_sessions: tuple[str, ...]
    date: datetime | None = None
    abstention: bool = False


@dataclass(frozen=True)
class Haystack:
    """What a set of questions is ranked against: sessions of turns (in time order)."""

    haystack_id: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]
    session_dates: dict[str, datetime | None] = field(default_factory=dict)

    @property
    def last_date(self) -> datetime | None:
        dates = [d for d in self.session_dates.values() if d is not None]
        return max(dates) if dates else None

    def memories(self, granularity: str, context: bool = True) -> list[dict[str, Any]]:
        """The haystack as memories (the JSONL records `hybridlab index` reads and `store_memory`
        takes): a turn each (the speaker as tag, the session date as `created_at`, the previous turn
        as `metadata.context`), or a session each (its turns as `Speaker: text` lines)."""
        if granularity not in GRANULARITIES:
            raise InvalidValueError(f"unknown granularity {granularity!r}; choose from {list(GRANULARITIES)}")
        if granularity == "turn":
            return [
                _memory(t.turn_id, t.text, (t.speaker,), t.date, t.session_id, t.previous if context else "")
                for t in self.turns
            ]
        sessions: dict[str, list[Turn]] = {}
        for turn in self.turns:
            sessions.setdefault(turn.session_id, []).append(turn)
        return [
            _memory(
                sid,
                "\n".join(f"{t.speaker}: {t.text}" for t in turns),
                tuple(dict.fromkeys(t.speaker for t in turns)),
                self.session_dates.get(sid),
                sid,
                "",
            )
            for sid, turns in sessions.items()
        ]

    def relevant(self, question: Question, granularity: str) -> tuple[str, ...]:
        """The ids a question's evidence is scored on at this granularity."""
        return question.evidence_turns if granularity == "turn" else question.evidence_sessions


def _memory(
    memory_id: str, content: str, tags: tuple[str, ...], date: datetime | None, session: str, context: str
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "id": memory_id,
        "content": content,
        "tags": list(tags),
        "memory_type": "conversation",
        "metadata": {"session": session, "speaker": ", ".join(tags)},
    }
    if date is not None:
        record["created_at"] = date.isoformat()
    if context:
        record["metadata"]["context"] = context
    return record


def turn_text(turn: dict[str, Any]) -> str:
    """A LoCoMo-style turn's text, with the caption of a photo it shares."""
    text = str(turn.get("text") or turn.get("content") or "").strip()
    caption = turn.get("blip_caption")
    return f"{text} [shares a photo: {caption}]".strip() if caption else text
