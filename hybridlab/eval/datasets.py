"""BEIR-layout test collections: corpus, queries, qrels, and their query splits.

What each split means: docs/internals/tune-eval.md#datasets-and-splits.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from hybridlab.config import REPO_ROOT
from hybridlab.errors import InvalidValueError, PathNotFoundError
from hybridlab.ingest.files import _open_text, find_file, iter_jsonl
from hybridlab.ingest.sources import irds_items, is_irds

Qrels = dict[str, dict[str, int]]


def data_dir() -> Path:
    """The folder holding BEIR datasets: `$HYBRIDLAB_DATA`, else `../shared/datasets` of the repo."""
    env = os.environ.get("HYBRIDLAB_DATA")
    if env:
        return Path(env)
    for candidate in (REPO_ROOT.parent / "shared" / "datasets", Path.cwd().parent / "shared" / "datasets"):
        if candidate.is_dir():
            return candidate
    return REPO_ROOT.parent / "shared" / "datasets"


def resolve_dataset(name_or_path: str | os.PathLike) -> Path:
    """A dataset folder from a name (looked up in the data dir or `ground_truth/`) or a path."""
    path = Path(name_or_path)
    if path.is_dir() or path.is_file() or is_irds(name_or_path):
        return path
    for base in (data_dir(), REPO_ROOT / "ground_truth"):
        if (base / str(name_or_path)).is_dir():
            return base / str(name_or_path)
    raise PathNotFoundError(
        f"dataset {str(name_or_path)!r} not found as a path, in {data_dir()} (set HYBRIDLAB_DATA) "
        f"or in {REPO_ROOT / 'ground_truth'}"
    )


def load_queries(folder: Path, split: str | None = None) -> dict[str, str]:
    """`{query_id: text}` from `queries-<split>.jsonl[.gz]` when `split` is given and that file
    exists, else from `queries.jsonl[.gz]` (BEIR keeps every split's queries in one file); or from
    a queries file, or an ir_datasets id."""
    if is_irds(folder):
        return {str(q.query_id): q.default_text() for q in irds_items(folder, "queries")}
    path = _queries_file(folder, split)
    queries: dict[str, str] = {}
    for line_number, obj in iter_jsonl(path):
        if "_id" not in obj or "text" not in obj:
            raise InvalidValueError(f"{path}:{line_number}: a query needs '_id' and 'text'")
        queries[str(obj["_id"])] = str(obj["text"])
    return queries


def _queries_file(folder: Path, split: str | None) -> Path:
    folder = Path(folder)
    if folder.is_file():
        return folder
    if split is not None:
        try:
            return find_file(folder, f"queries-{split}.jsonl")
        except FileNotFoundError:
            pass
    return find_file(folder, "queries.jsonl")


def load_query_metadata(folder: Path, split: str | None = None) -> dict[str, dict]:
    """`{query_id: metadata}` (e.g. the query's kind) from the queries file, where present."""
    if is_irds(folder):
        return {}
    path = _queries_file(folder, split)
    return {str(obj["_id"]): dict(obj.get("metadata") or {}) for _, obj in iter_jsonl(path)}


def load_qrels(folder_or_file: Path, split: str = "test") -> Qrels:
    """`{query_id: {doc_id: relevance}}` from `qrels-<split>.tsv` or `qrels/<split>.tsv` of a folder, a
    qrels file (3 or 4 columns, tab- or space-separated), or an ir_datasets id."""
    path = Path(folder_or_file)
    if is_irds(path):
        qrels: Qrels = {}
        for qrel in irds_items(path, "qrels"):
            qrels.setdefault(str(qrel.query_id), {})[str(qrel.doc_id)] = int(qrel.relevance)
        return qrels
    if path.is_dir():
        path = find_file(path, f"qrels-{split}.tsv", f"qrels/{split}.tsv")
    qrels = {}
    with _open_text(path) as handle:
        for line_number, line in enumerate(handle, start=1):
            parts = line.rstrip("\n").split("\t") if "\t" in line else line.split()
            if not line.strip() or (line_number == 1 and parts[0] in {"query-id", "query_id", "qid"}):
                continue
            if len(parts) == 4:  # TREC qrels: qid 0 docid rel
                parts = [parts[0], parts[2], parts[3]]
            if len(parts) != 3:
                raise InvalidValueError(
                    f"{path}:{line_number}: expected 'query-id corpus-id score' (or TREC's 4 columns)"
                )
            qid, doc_id, score = parts
            try:
                relevance = int(score)
            except ValueError:
                raise InvalidValueError(f"{path}:{line_number}: score {score!r} is not an integer") from None
            qrels.setdefault(qid, {})[doc_id] = relevance
    return qrels


@dataclass(frozen=True)
class Dataset:
    """A BEIR-layout dataset on disk: queries and qrels loaded, the corpus read on demand."""

    name: str
    path: Path
    queries: dict[str, str]
    qrels: Qrels

    def split(self, split: str) -> Dataset:
        """The dataset of split `split` (`all`, `dev`, `test`, or `train` where the collection has
        one): a deterministic sha1 half of these queries, or the collection's official split."""
        if split == "all":
            return self
        if has_train_split(self.path):
            return load_dataset(self.path, split)
        ids = split_query_ids(self.qrels, split)
        return Dataset(
            self.name,
            self.path,
            {qid: self.queries[qid] for qid in ids if qid in self.queries},
            {qid: self.qrels[qid] for qid in ids},
        )


def has_train_split(folder: Path) -> bool:
    """Whether a dataset folder has an official train split (`qrels-train.tsv` / `qrels/train.tsv`)."""
    if not Path(folder).is_dir():
        return False
    try:
        find_file(Path(folder), "qrels-train.tsv", "qrels/train.tsv")
    except FileNotFoundError:
        return False
    return True


def load_dataset(name_or_path: str | os.PathLike, split: str = "all", queries: Path | None = None) -> Dataset:
    """Queries (only those with judgements) and qrels of one split of a BEIR-layout dataset, a qrels
    file or an ir_datasets id (docs/internals/tune-eval.md#datasets-and-splits); `queries`: where
    the queries are when not beside the qrels."""
    folder = resolve_dataset(name_or_path)
    official = has_train_split(folder)
    splits = ["all", "dev", "test", "train"] if official else ["all", "dev", "test"]
    if split not in splits:
        raise InvalidValueError(f"unknown split {split!r}; choose from {splits}")
    file_split = "train" if official and split in {"train", "dev"} else "test"
    qrels = load_qrels(folder, file_split)
    texts = {qid: text for qid, text in load_queries(queries or folder, file_split).items() if qid in qrels}
    dataset = Dataset(
        str(folder) if is_irds(folder) else folder.name, folder, texts, {qid: qrels[qid] for qid in texts}
    )
    return dataset if official else dataset.split(split)


def split_query_ids(qrels: Qrels, split: str, dev_fraction: float = 0.5) -> list[str]:
    """A deterministic dev/test split by sha1 of the query id (stable across runs and machines)."""
    if split not in {"dev", "test"}:
        raise InvalidValueError(f"unknown split {split!r}; choose from ['all', 'dev', 'test']")

    def bucket(qid: str) -> float:
        return int(hashlib.sha1(qid.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF

    return sorted(qid for qid in qrels if (bucket(qid) < dev_fraction) == (split == "dev"))
