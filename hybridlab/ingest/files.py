"""Reading the files documents come in: JSON lines (plain or gzipped), found by name."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

from hybridlab.errors import InvalidValueError, PathNotFoundError


def _open_text(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8")


def find_file(folder: Path, *names: str) -> Path:
    """The first of `names` (each also tried with `.gz`) that exists in `folder`."""
    for name in names:
        for candidate in (folder / name, folder / f"{name}.gz"):
            if candidate.is_file():
                return candidate
    raise PathNotFoundError(f"none of {', '.join(names)} (or .gz) in {folder}")


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each non-blank line; a bad line raises ValueError naming file:line."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:  # decoded per line, so bad UTF-8 is reported with its line
        for line_number, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InvalidValueError(
                    f"{path}:{line_number}: not valid UTF-8 (byte {error.start} of the line)"
                ) from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as error:
                raise InvalidValueError(f"{path}:{line_number}: invalid JSON ({error.msg})") from None
            if not isinstance(obj, dict):
                raise InvalidValueError(
                    f"{path}:{line_number}: expected a JSON object, got {type(obj).__name__}"
                )
            yield line_number, obj
