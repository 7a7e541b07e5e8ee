"""Runs as files: read TREC and ranx-JSON runs (gzipped or not) written by any tool, write TREC runs.

See docs/internals/tune-eval.md#run-files.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Mapping
from pathlib import Path

from hybridlab.errors import InvalidValueError, PathNotFoundError

Run = dict[str, dict[str, float]]

__all__ = ["Run", "read_run", "run_name", "write_run"]

_SUFFIXES = (".gz", ".json", ".trec", ".run", ".txt", ".tsv")


def read_run(path: str | Path) -> Run:
    """The run in a TREC or ranx-JSON file (told apart by a leading ``{``), gzipped or not.

    ValueError, naming the file and line, for a line without six fields, a score that is not a finite
    number, or a document listed twice for one query."""
    path = Path(path)
    if not path.is_file():
        raise PathNotFoundError(f"run file not found: {path}")
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":  # gzip magic, whatever the suffix
        data = gzip.decompress(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidValueError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    return _parse_json(path, text) if text.lstrip().startswith("{") else _parse_trec(path, text)


def _parse_trec(path: Path, text: str) -> Run:
    run: Run = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 6:
            raise InvalidValueError(
                f"{path}:{number}: expected 6 fields 'qid Q0 doc_id rank score tag', "
                f"got {len(fields)}: {line.strip()[:80]!r}"
            )
        qid, _, doc_id, _, score, _ = fields
        run.setdefault(qid, {})
        if doc_id in run[qid]:
            raise InvalidValueError(f"{path}:{number}: document {doc_id!r} listed twice for query {qid!r}")
        run[qid][doc_id] = _score(path, number, score)
    return run


def _parse_json(path: Path, text: str) -> Run:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidValueError(f"{path}:{error.lineno}: not valid JSON ({error.msg})") from None
    run: Run = {}
    for qid, docs in data.items():
        if not isinstance(docs, dict):
            raise InvalidValueError(
                f"{path}: query {qid!r} maps to {type(docs).__name__}, expected {{doc_id: score}}"
            )
        run[str(qid)] = {str(doc): _score(path, None, value, qid) for doc, value in docs.items()}
    return run


def _score(path: Path, line: int | None, value: object, qid: str | None = None) -> float:
    where = f"{path}:{line}" if line is not None else f"{path} (query {qid!r})"
    try:
        score = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InvalidValueError(f"{where}: score {value!r} is not a number") from None
    if isinstance(value, bool) or not math.isfinite(score):
        raise InvalidValueError(f"{where}: score {value!r} is not a finite number")
    return score


def run_name(path: str | Path) -> str:
    """A run's name from its file name, less the run and compression suffixes (``bm25.trec.gz`` ->
    ``bm25``)."""
    name = Path(path).name
    while name.endswith(_SUFFIXES) and "." in name:
        name = name.rsplit(".", 1)[0]
    return name or Path(path).name


def trec_text(run: Mapping[str, Mapping[str, float]], name: str, score_format: str) -> str:
    """TREC lines `qid Q0 doc_id rank score name`, each query ranked by score then doc id; the score
    written by `score_format` (`"{!r}"` in full, `"{:.6f}"`)."""
    lines = [
        f"{qid} Q0 {doc} {rank} {score_format.format(score)} {name}"
        for qid, docs in run.items()
        for rank, (doc, score) in enumerate(sorted(docs.items(), key=lambda item: (-item[1], item[0])), 1)
    ]
    return "\n".join(lines) + "\n"


def write_run(run: Mapping[str, Mapping[str, float]], path: str | Path, name: str = "hybridlab") -> None:
    """A TREC run file (``.json``: a ranx JSON run; ``.gz``: gzipped), ranked by score then doc id.

    Scores are written in full (``repr``), so fused scores that differ only far behind the decimal
    point keep their order when the file is read back."""
    path = Path(path)
    if path.name.removesuffix(".gz").endswith(".json"):
        text = json.dumps({qid: dict(docs) for qid, docs in run.items()}, allow_nan=False) + "\n"
    else:
        text = trec_text(run, name, "{!r}")
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
