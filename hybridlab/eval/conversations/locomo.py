"""LoCoMo (Maharana et al., ACL 2024; github.com/snap-research/LoCoMo, `data/locomo10.json`, CC BY-NC
4.0: read from the path a user gives, never downloaded or committed): 10 conversations, a haystack
each; every question ranks the turns (or sessions) of its own conversation."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybridlab.eval.conversations.records import (
    BenchmarkFileError,
    Haystack,
    Question,
    Turn,
    read_json_list,
    turn_text,
)

#: the paper's category names of the released file's numbers (1-5)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
ADVERSARIAL = "adversarial"
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%H:%M on %d %B, %Y")


def parse_date(text: str | None, where: str) -> datetime | None:
    """A LoCoMo session date ("1:56 pm on 8 May, 2023") as UTC; None when absent."""
    if not text:
        return None
    cleaned = " ".join(str(text).split())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise BenchmarkFileError(f"{where}: unreadable date {text!r}")


def evidence_ids(raw: Any) -> tuple[str, ...]:
    """Evidence turn ids as `D<session>:<turn>` (the file also has `D:11:26` and `D8:6; D9:17`)."""
    items = raw if isinstance(raw, list) else [raw]
    found = [f"D{s}:{t}" for item in items for s, t in _EVIDENCE.findall(str(item))]
    return tuple(dict.fromkeys(found))


def read_locomo(path: str | Path) -> list[Haystack]:
    """The conversations of a `locomo10.json`-format file, one haystack each."""
    path = Path(path)
    data = read_json_list(path, "LoCoMo", "conversations (locomo10.json)")
    return [_conversation(item, f"{path}[{i}]") for i, item in enumerate(data)]


def _conversation(item: Any, where: str) -> Haystack:
    if not isinstance(item, dict) or not isinstance(item.get("conversation"), dict) or "qa" not in item:
        raise BenchmarkFileError(f"{where}: a conversation needs the fields 'conversation' and 'qa'")
    sample_id = str(item.get("sample_id") or where)
    conversation = item["conversation"]
    turns: list[Turn] = []
    dates: dict[str, datetime | None] = {}
    numbers = sorted(int(m.group(1)) for key in conversation if (m := re.fullmatch(r"session_(\d+)", key)))
    for number in numbers:
        sid = f"S{number}"
        dates[sid] = parse_date(
            conversation.get(f"session_{number}_date_time"), f"{where}.session_{number}_date_time"
        )
        previous = ""
        for j, raw in enumerate(conversation[f"session_{number}"]):
            if not isinstance(raw, dict) or "dia_id" not in raw or "speaker" not in raw:
                raise BenchmarkFileError(
                    f"{where}.session_{number}[{j}]: a turn needs 'speaker' and 'dia_id'"
                )
            text = turn_text(raw) or "[no text]"
            turns.append(Turn(str(raw["dia_id"]), sid, str(raw["speaker"]), text, dates[sid], previous))
            previous = f"{raw['speaker']}: {text}"
    questions = []
    for k, qa in enumerate(item["qa"]):
        if not isinstance(qa, dict) or "question" not in qa or "category" not in qa:
            raise BenchmarkFileError(f"{where}.qa[{k}]: a question needs 'question' and 'category'")
        evidence = evidence_ids(qa.get("evidence", []))
        sessions = tuple(dict.fromkeys(f"S{e.split(':')[0][1:]}" for e in evidence))
        questions.append(
            Question(
                f"{sample_id}-q{k}",
                str(qa["question"]),
                CATEGORIES.get(int(qa["category"]), str(qa["category"])),
                evidence,
                sessions,
            )
        )
    return Haystack(sample_id, tuple(turns), tuple(questions), dates)
