"""Checks of our judged collections in `ground_truth/`: their files are the source of truth.

Each set is a folder with `queries.jsonl` (`{"_id", "text", "metadata": {"kind"}}`), one or more
`qrels-<split>.tsv` (`query-id<TAB>corpus-id<TAB>score`, with that header) and a corpus: a memories
JSONL in the folder, named by its `eval.json` (`memories`), or a folder of files outside the
repository whose relative paths are the document ids (`holoviz`: `$HYBRIDLAB_CORPORA/holoviz`).
The files are edited by hand; :func:`validate_set` finds what an edit broke, as :class:`Problem` s
naming the file, the line and the field. `python ground_truth/validate.py [SET ...]` checks
every set (exit status 1 on a problem); `make test` runs the same checks (`tests/eval`).
"""
from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from hybridlab.eval.evalsets import GROUND_TRUTH, corpora_dir
from hybridlab.ingest.sources import parse_datetime

QRELS_HEADER = ["query-id", "corpus-id", "score"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a ground-truth file: where (`path`, `line`, `field`) and what."""

    path: Path
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.field}: {self.message}"


@dataclass(frozen=True)
class SetRules:
    """What a set's files must satisfy beyond the common format.

    `kinds`: the allowed `metadata.kind` of a query; `grades`: the allowed qrels scores;
    `min_best`/`max_best`: how many grade-2 judgements a query may have (None = any number);
    `memory_types`: the allowed `memory_type` of a memory; `one_answer_kinds`: kinds judged with exactly
    one document; `tag_kind`: the kind whose judgements are exactly the memories carrying the query
    text as a tag (hyphen, underscore and space variants equal); `paraphrase_kind`: the kind that
    shares no content word (nor a 5-letter stem) with its relevant memories."""

    kinds: frozenset[str]
    grades: frozenset[int] = frozenset({1, 2})
    min_best: int = 0
    max_best: int | None = None
    memory_types: frozenset[str] = frozenset()
    one_answer_kinds: frozenset[str] = frozenset()
    tag_kind: str | None = None
    paraphrase_kind: str | None = None


#: name -> rules; a set folder not listed here is refused (add its rules first).
RULES: dict[str, SetRules] = {
    "memories": SetRules(
        kinds=frozenset({"current", "general", "identifier", "paraphrase", "project-generic", "tag"}),
        max_best=1,
        memory_types=frozenset({"decision", "fact", "incident", "note", "preference", "todo"}),
        one_answer_kinds=frozenset({"current"}),
        tag_kind="tag",
        paraphrase_kind="paraphrase",
    ),
    "holoviz": SetRules(kinds=frozenset({"api", "concept", "cross", "howto"}), min_best=1),
}


@dataclass
class SetReport:
    """What :func:`validate_set` read and found; `documents_checked` is False when the corpus was not
    available, so qrels' document ids could not be looked up."""

    name: str
    queries: int = 0
    judgements: int = 0
    documents: int = 0
    documents_checked: bool = True
    problems: list[Problem] = field(default_factory=list)


def ground_truth_sets(root: Path = GROUND_TRUTH) -> list[str]:
    """The set folders under `root` (those holding a `queries.jsonl`)."""
    return sorted(p.parent.name for p in Path(root).glob("*/queries.jsonl"))


def default_corpus(name: str, folder: Path) -> Path:
    """Where a set's corpus is: the file its `eval.json` names, else `$HYBRIDLAB_CORPORA/<name>`."""
    settings = folder / "eval.json"
    if settings.is_file():
        try:
            return folder / str(json.loads(settings.read_text(encoding="utf-8")).get("corpus", ""))
        except (ValueError, AttributeError):
            return folder / "memories.jsonl"  # eval.json's own problem is reported by validate_set
    return corpora_dir() / name


def validate_set(folder: str | Path, corpus: str | Path | None = None,
                 rules: SetRules | None = None) -> SetReport:
    """Check one set folder against its :data:`RULES` (or `rules`). `corpus` defaults to
    :func:`default_corpus`; a corpus folder that does not exist leaves document ids unchecked."""
    folder = Path(folder)
    name = folder.name
    if rules is None:
        if name not in RULES:
            raise ValueError(f"unknown ground-truth set {name!r}; choose from {sorted(RULES)}")
        rules = RULES[name]
    corpus = Path(corpus) if corpus is not None else default_corpus(name, folder)
    report = SetReport(name)
    problems = report.problems

    if (folder / "eval.json").is_file():
        _check_eval_json(folder / "eval.json", problems)
    memories: dict[str, tuple[int, dict]] = {}
    if corpus.suffix == ".jsonl":
        memories = _check_memories(corpus, rules, _now(folder), problems)
        documents: set[str] | None = set(memories)
        report.documents = len(memories)
    elif corpus.is_dir():
        documents = None  # looked up on disk, one qrel at a time
    else:
        documents, report.documents_checked = set(), False

    queries = _check_queries(folder / "queries.jsonl", rules, problems)
    report.queries = len(queries)
    judged: dict[str, dict[str, tuple[int, Path, int]]] = {}  # qid -> doc -> (grade, qrels file, line)
    qrels_files = sorted(folder.glob("qrels-*.tsv"))
    if not qrels_files:
        problems.append(Problem(folder, None, "qrels", "no qrels-<split>.tsv file"))
    for path in qrels_files:
        report.judgements += _check_qrels(path, rules, queries, corpus, documents, report.documents_checked,
                                          judged, problems)

    for qid, (line, kind, text) in queries.items():
        _check_query_judgements(folder / "queries.jsonl", line, qid, kind, text, judged.get(qid, {}), rules,
                                memories, problems)
    return report


def _check_eval_json(path: Path, problems: list[Problem]) -> None:
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        problems.append(Problem(path, None, "eval.json", f"invalid JSON ({error})"))
        return
    if not isinstance(settings, dict):
        problems.append(Problem(path, None, "eval.json", "must be a JSON object"))
        return
    for key in ("corpus", "queries", "qrels"):
        value = settings.get(key)
        if not isinstance(value, str) or not (path.parent / value).is_file():
            problems.append(Problem(path, None, key, f"must name a file next to it, got {value!r}"))
    if "now" in settings and _time(settings["now"]) is None:
        problems.append(Problem(path, None, "now", f"not an ISO-8601 time: {settings['now']!r}"))


def _time(value: object) -> datetime | None:
    """An ISO-8601 string as an aware UTC datetime (as the memory loader reads it), else None."""
    try:
        return parse_datetime(value, "")
    except ValueError:
        return None


def _now(folder: Path) -> datetime | None:
    """The set's reference time (`eval.json`'s `now`), if it has one."""
    try:
        return _time(json.loads((folder / "eval.json").read_text(encoding="utf-8")).get("now"))
    except (OSError, ValueError, AttributeError):
        return None


def _read_jsonl(path: Path, problems: list[Problem]) -> Iterator[tuple[int, dict]]:
    """(line, object) of every parseable, non-blank line; the others become problems."""
    if not path.is_file():
        problems.append(Problem(path, None, "file", "missing"))
        return
    with path.open("rb") as handle:
        for line, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                problems.append(Problem(path, line, "line", f"not valid UTF-8 (byte {error.start})"))
                continue
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as error:
                problems.append(Problem(path, line, "line", f"invalid JSON ({error.msg})"))
                continue
            if not isinstance(obj, dict):
                kind = type(obj).__name__
                problems.append(Problem(path, line, "line", f"expected a JSON object, got {kind}"))
                continue
            yield line, obj


def _nonempty_str(obj: dict, key: str) -> bool:
    return isinstance(obj.get(key), str) and bool(obj[key].strip())


def _check_memories(path: Path, rules: SetRules, now: datetime | None,
                    problems: list[Problem]) -> dict[str, tuple[int, dict]]:
    """The memories by id (line, object); a memory whose id is unusable is left out."""
    memories: dict[str, tuple[int, dict]] = {}
    contents: dict[str, int] = {}
    for line, obj in _read_jsonl(path, problems):
        def bad(field_name: str, message: str, line: int = line) -> None:
            problems.append(Problem(path, line, field_name, message))

        if not _nonempty_str(obj, "id"):
            bad("id", f"must be a non-empty string, got {obj.get('id')!r}")
            continue
        memory_id = obj["id"]
        if memory_id in memories:
            bad("id", f"duplicate id {memory_id!r} (first on line {memories[memory_id][0]})")
            continue
        memories[memory_id] = (line, obj)
        if not _nonempty_str(obj, "content"):
            bad("content", "must be a non-empty string")
        elif obj["content"] in contents:
            bad("content", f"same content as line {contents[obj['content']]}")
        else:
            contents[obj["content"]] = line
        tags = obj.get("tags")
        if not isinstance(tags, list) or not tags or not all(isinstance(t, str) and t.strip() for t in tags):
            bad("tags", f"must be a non-empty list of non-empty strings, got {tags!r}")
            tags = []
        elif any(t != t.lower() for t in tags):
            bad("tags", f"must be lower-case, got {tags!r}")
        created = _time(obj.get("created_at"))
        if created is None:
            bad("created_at", f"not an ISO-8601 time: {obj.get('created_at')!r}")
        elif now is not None and created >= now:
            bad("created_at", f"{obj['created_at']} is not before the set's now ({now:%Y-%m-%dT%H:%M:%SZ})")
        if rules.memory_types and obj.get("memory_type") not in rules.memory_types:
            bad("memory_type", f"{obj.get('memory_type')!r} is not one of {sorted(rules.memory_types)}")
        metadata = obj.get("metadata", {})
        if not isinstance(metadata, dict):
            bad("metadata", "must be an object")
        elif "project" in metadata and metadata["project"] not in tags:
            bad("tags", f"a project memory carries its project {metadata['project']!r} as a tag")
    return memories


def _check_queries(path: Path, rules: SetRules, problems: list[Problem]) -> dict[str, tuple[int, str, str]]:
    """The queries by id: (line, kind, text)."""
    queries: dict[str, tuple[int, str, str]] = {}
    texts: dict[str, int] = {}
    for line, obj in _read_jsonl(path, problems):
        def bad(field_name: str, message: str, line: int = line) -> None:
            problems.append(Problem(path, line, field_name, message))

        if not _nonempty_str(obj, "_id"):
            bad("_id", f"must be a non-empty string, got {obj.get('_id')!r}")
            continue
        qid = obj["_id"]
        if qid in queries:
            bad("_id", f"duplicate id {qid!r} (first on line {queries[qid][0]})")
            continue
        text = obj.get("text") if _nonempty_str(obj, "text") else ""
        if not text:
            bad("text", "must be a non-empty string")
        elif text.strip().lower() in texts:
            bad("text", f"same text as line {texts[text.strip().lower()]}")
        else:
            texts[text.strip().lower()] = line
        metadata = obj.get("metadata")
        kind = metadata.get("kind") if isinstance(metadata, dict) else None
        if kind not in rules.kinds:
            bad("metadata.kind", f"{kind!r} is not one of {sorted(rules.kinds)}")
        queries[qid] = (line, str(kind), text)
    return queries


def _check_qrels(path: Path, rules: SetRules, queries: dict, corpus: Path, documents: set[str] | None,
                 documents_checked: bool, judged: dict[str, dict[str, tuple[int, Path, int]]],
                 problems: list[Problem]) -> int:
    """Check one qrels file, adding its judgements to `judged`; returns how many lines it judges."""
    count = 0
    with path.open(encoding="utf-8", newline="") as handle:
        for line, raw in enumerate(handle, start=1):
            def bad(field_name: str, message: str, line: int = line) -> None:
                problems.append(Problem(path, line, field_name, message))

            columns = raw.rstrip("\r\n").split("\t")
            if line == 1:
                if columns != QRELS_HEADER:
                    bad("header", f"expected {'<TAB>'.join(QRELS_HEADER)}, got {raw.rstrip()!r}")
                continue
            if not raw.strip():
                continue
            if len(columns) != 3:
                bad("line", f"expected 3 tab-separated columns, got {len(columns)}")
                continue
            qid, doc_id, score = columns
            count += 1
            if qid not in queries:
                bad("query-id", f"{qid!r} is not in queries.jsonl")
            if documents is None:  # a folder of files: the id is a relative path
                outside = "\\" in doc_id or doc_id.startswith("/") or ".." in doc_id.split("/")
                if outside or not (corpus / doc_id).is_file():
                    bad("corpus-id", f"{doc_id!r} is not a file of the corpus {corpus}")
            elif documents_checked and doc_id not in documents:
                bad("corpus-id", f"{doc_id!r} is not in {corpus.name}")
            try:
                grade = int(score)
            except ValueError:
                bad("score", f"{score!r} is not an integer")
                continue
            if grade not in rules.grades:
                bad("score", f"{grade} is not one of {sorted(rules.grades)}")
            rels = judged.setdefault(qid, {})
            if doc_id in rels:
                _, first_path, first_line = rels[doc_id]
                bad("corpus-id", f"{qid} {doc_id} judged twice (first at {first_path.name}:{first_line})")
            rels[doc_id] = (grade, path, line)
    return count


def _check_query_judgements(path: Path, line: int, qid: str, kind: str, text: str,
                            rels: dict[str, tuple[int, Path, int]], rules: SetRules,
                            memories: dict[str, tuple[int, dict]], problems: list[Problem]) -> None:
    def bad(field_name: str, message: str, where: Path = path, at: int | None = line) -> None:
        problems.append(Problem(where, at, field_name, message))

    if not rels:
        bad("_id", f"{qid} has no judgement")
        return
    best = sum(1 for grade, _, _ in rels.values() if grade == 2)
    if best < rules.min_best or (rules.max_best is not None and best > rules.max_best):
        wanted = (f"at least {rules.min_best}" if rules.max_best is None
                  else f"{rules.min_best} to {rules.max_best}")
        bad("score", f"{qid} has {best} grade-2 judgements, wants {wanted}")
    if kind in rules.one_answer_kinds and len(rels) != 1:
        bad("_id", f"{qid} ({kind}) must have exactly one judged document, has {len(rels)}")
    if memories and kind == rules.tag_kind:
        carrying = {mid for mid, (_, obj) in memories.items()
                    if _norm_tag(text) in {_norm_tag(t) for t in obj.get("tags") or [] if isinstance(t, str)}}
        for mid in sorted(carrying - set(rels)):
            bad("corpus-id", f"{qid} (tag {text!r}): {mid} carries the tag but is not judged")
        for mid in sorted(set(rels) - carrying):
            bad("corpus-id", f"{qid} (tag {text!r}): {mid} is judged but does not carry the tag",
                *rels[mid][1:])
    if memories and kind == rules.paraphrase_kind:
        words = _content_words(text)
        for mid, (_, where, at) in rels.items():
            if mid in memories:
                shared = sorted({a for a in words for b in _content_words(memories[mid][1].get("content", ""))
                                 if _shares_stem(a, b)})
                if shared:
                    bad("text", f"{qid} (paraphrase) shares {shared} with {mid}", where, at)


def _norm_tag(tag: str) -> str:
    return re.sub(r"[\s_\-]+", " ", tag.strip().lower())


_STOPWORDS = frozenset({
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "by", "at", "from", "as",
    "is", "are", "was", "were", "be", "been", "being", "it", "its", "this", "that", "these", "those",
    "what", "which", "who", "whom", "how", "why", "when", "where", "does", "do", "did", "done", "can",
    "could", "should", "would", "will", "we", "our", "us", "you", "your", "i", "my", "me", "he", "she",
    "they", "them", "their", "there", "here", "not", "no", "nor", "so", "if", "then", "than", "too",
    "very", "just", "about", "after", "before", "over", "under", "between", "into", "out", "up", "down",
    "again", "also", "only", "own", "same", "such", "each", "both", "any", "all", "few", "more", "most",
    "other", "some", "get", "got", "has", "have", "had", "having", "new", "now", "one", "two",
})


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", str(text).lower()) if w not in _STOPWORDS and len(w) > 1}


def _shares_stem(a: str, b: str) -> bool:
    """Equal words, or equal first 5 letters (first 4 when the shorter word has 4)."""
    if a == b:
        return True
    k = min(5, len(a), len(b))
    return k >= 4 and a[:k] == b[:k]


def main(argv: list[str] | None = None) -> int:
    """Check the named sets (default: every set under `ground_truth/`); 1 if any has a problem."""
    names = (sys.argv[1:] if argv is None else argv) or ground_truth_sets()
    failed = False
    for name in names:
        report = validate_set(GROUND_TRUTH / name)
        for problem in report.problems:
            print(problem)
        corpus = default_corpus(name, GROUND_TRUTH / name)
        note = "" if report.documents_checked else f" (no corpus at {corpus}: document ids not checked)"
        status = f"{len(report.problems)} problem(s)" if report.problems else "OK"
        print(f"{name}: {report.queries} queries, {report.judgements} judgements: {status}{note}")
        failed = failed or bool(report.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
