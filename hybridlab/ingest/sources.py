"""Read sources into documents: folders of markdown/reST/text/notebooks, BEIR corpora (a folder or its
`corpus.jsonl`), memories JSONL, and ir_datasets datasets by id (`irds:beir/scifact`, extra `irds`).

Bad files inside a folder are skipped with a warning (counted); a malformed memories line or a
missing path is an error naming the file, line and field.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hybridlab.errors import InvalidValueError, PathNotFoundError
from hybridlab.extras import require
from hybridlab.ingest.chunking import markdown_headings, rst_headings
from hybridlab.ingest.files import find_file, iter_jsonl

logger = logging.getLogger(__name__)

TEXT_SUFFIXES = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "rst",
    ".txt": "text",
    ".ipynb": "notebook",
}
SKIP_DIRS = {".git", ".ipynb_checkpoints", "__pycache__", "node_modules", "_build", ".hybridlab"}
MAX_FILE_BYTES = 20 * 1024 * 1024
MAX_MEMORY_CHARS = 100_000
#: the prefix of an ir_datasets id given as a source or dataset (`irds:beir/scifact/test`)
IRDS = "irds:"


@dataclass(frozen=True)
class Document:
    """One document as read from a source, before chunking."""

    doc_id: str
    source: str
    collection: str
    title: str
    text: str
    doc_type: str
    created_at: datetime | None = None
    updated_at: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    language: str | None = None

    @property
    def content_sha256(self) -> str:
        """Hash of everything that shapes the indexed chunks (text, title, tags, dates, metadata)."""
        payload = json.dumps(
            [
                self.title,
                self.text,
                self.doc_type,
                self.collection,
                list(self.tags),
                self.language,
                str(self.created_at),
                str(self.updated_at),
                self.metadata,
            ],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class IngestReport:
    """What reading the sources found: documents per source, and skipped files with reasons."""

    documents: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)


def parse_datetime(value: Any, where: str) -> datetime:
    """ISO-8601 (a trailing `Z` allowed) to an aware UTC datetime; ValueError names `where`."""
    if not isinstance(value, str):
        raise InvalidValueError(
            f"{where}: 'created_at' must be an ISO-8601 string, got {type(value).__name__}",
            field="created_at",
        )
    try:
        parsed = datetime.fromisoformat(value.strip())  # Python 3.11+ reads a trailing Z
    except ValueError:
        raise InvalidValueError(
            f"{where}: 'created_at' is not ISO-8601: {value!r}", field="created_at"
        ) from None
    try:
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except OverflowError:  # "0001-01-01T00:00+01:00" has no UTC time
        raise InvalidValueError(
            f"{where}: 'created_at' is out of range in UTC (years 1 to 9999): {value!r}", field="created_at"
        ) from None


def is_irds(source: str | os.PathLike) -> bool:
    """Whether a source or dataset names an ir_datasets id (`irds:<id>`)."""
    return str(source).startswith(IRDS)


def irds_dataset(source: str | os.PathLike):
    """The ir_datasets dataset of `irds:<id>` (online, ir_datasets downloads it into its own cache);
    MissingExtraError without the `irds` extra, ValueError for an id ir_datasets does not know."""
    require("ir_datasets", extra="irds")
    import ir_datasets

    dataset_id = str(source).removeprefix(IRDS)
    try:
        return ir_datasets.load(dataset_id)
    except KeyError:
        raise InvalidValueError(
            f"{source}: ir_datasets has no dataset {dataset_id!r} (see ir-datasets.com)"
        ) from None


def irds_items(source: str | os.PathLike, kind: str) -> Iterator[Any]:
    """The `docs`, `queries` or `qrels` of an ir_datasets dataset; ValueError when it has none or
    they cannot be fetched (offline, ir_datasets reads only what its cache holds)."""
    dataset = irds_dataset(source)
    if not getattr(dataset, f"has_{kind}")():
        raise InvalidValueError(f"{source}: the dataset has no {kind}")
    try:
        yield from getattr(dataset, f"{kind}_iter")()
    except OSError as error:  # requests' connection errors are OSErrors
        raise InvalidValueError(
            f"{source}: ir_datasets could not fetch its {kind} ({type(error).__name__}); offline it "
            "reads only what its cache holds (IR_DATASETS_HOME, default ~/.ir_datasets)"
        ) from None


def iter_irds(source: str | os.PathLike) -> Iterator[Document]:
    """Documents of an ir_datasets dataset (`title` where its documents have one, `text` or their
    default text); collection = the dataset id."""
    dataset_id = str(source).removeprefix(IRDS)
    for doc in irds_items(source, "docs"):
        text = doc.text if isinstance(getattr(doc, "text", None), str) else doc.default_text()
        yield Document(
            str(doc.doc_id),
            str(source),
            dataset_id,
            str(getattr(doc, "title", "") or ""),
            text,
            "beir",
            None,
            None,
            {},
            (),
            "text",
        )


def source_id(path: Path) -> str:
    """The key an index records a source under: its absolute path, or `irds:<id>`."""
    return str(path) if is_irds(path) else str(path.resolve())


def _is_beir_file(path: Path) -> bool:
    """A BEIR `corpus.jsonl[.gz]` given as a file: by its name, or a first object with `_id` and no `id`."""
    if path.name in {"corpus.jsonl", "corpus.jsonl.gz"}:
        return True
    first = next(iter_jsonl(path), (0, {}))[1]
    return "_id" in first and "id" not in first


def source_kind(path: Path) -> str:
    """`beir`, `memories`, `folder`, `file` or `irds` for a path; FileNotFoundError/ValueError otherwise."""
    if is_irds(path):
        return "irds"
    if not path.exists():
        raise PathNotFoundError(f"no such file or folder: {path}")
    if path.is_dir():
        if any((path / name).is_file() for name in ("corpus.jsonl", "corpus.jsonl.gz")):
            return "beir"
        return "folder"
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        return "beir" if _is_beir_file(path) else "memories"
    if path.suffix.lower() in TEXT_SUFFIXES:
        return "file"
    raise InvalidValueError(f"{path}: not a folder, BEIR dataset or memories .jsonl file")


def read_text_file(path: Path, size: int | None = None) -> str:
    """UTF-8 text of a file; ValueError for binary (NUL bytes), too large or undecodable files
    (`size`: its size when already known from a stat)."""
    size = path.stat().st_size if size is None else size
    if size > MAX_FILE_BYTES:
        raise InvalidValueError(f"file too large ({size / 1e6:.1f} MB > {MAX_FILE_BYTES / 1e6:.0f} MB)")
    data = path.read_bytes()
    if b"\x00" in data:
        raise InvalidValueError("binary file (NUL bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        text = data.decode("utf-8", errors="replace")
        logger.warning("%s: not valid UTF-8 at byte %d; undecodable bytes replaced", path, error.start)
        return text


def notebook_text(raw: str) -> tuple[str, str | None]:
    """Markdown and code cells of a notebook as one markdown text (code fenced), plus its kernel
    language. Outputs are ignored. ValueError for an invalid notebook."""
    import nbformat

    try:
        # read and converted without nbformat's schema validation: its slips (ids on old-format
        # cells, outputs on markdown cells) do not stop reading the cells, and `nbformat.reads`
        # would log each as an ERROR with a cell dump on every index check
        notebook = nbformat.convert(nbformat.reader.reads(raw), 4)
    except Exception as error:  # noqa: BLE001 (nbformat raises several types for bad JSON / schema)
        raise InvalidValueError(
            f"invalid notebook ({type(error).__name__}: {str(error).splitlines()[0][:120]})"
        ) from None
    metadata = notebook.get("metadata", {})
    language = (
        (metadata.get("kernelspec", {}) or {}).get("language")
        or (metadata.get("language_info", {}) or {}).get("name")
        or "python"
    )
    parts: list[str] = []
    for cell in notebook.get("cells", []):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if not source.strip():
            continue
        if cell.get("cell_type") == "code":
            parts.append(f"```{language}\n{source.rstrip()}\n```")
        else:
            parts.append(source.strip())
    return "\n\n".join(parts) + "\n", str(language).lower()


def first_heading(text: str, fmt: str) -> str | None:
    """The first top-level (H1) heading of a markdown/reST text (reST: the first adornment style).
    A document whose headings start at H2 or deeper (e.g. Panel's reference notebooks, whose first
    heading is "Parameters:") has none: its file name is the better title."""
    headings = (
        markdown_headings(text)
        if fmt in {"markdown", "notebook"}
        else rst_headings(text)
        if fmt == "rst"
        else []
    )
    for _, level, title in headings:
        if title and level == 1:
            return title
    return None


def read_document_file(
    path: Path, doc_id: str, source: str, collection: str, info: os.stat_result | None = None
) -> Document:
    """One markdown/reST/text/notebook file as a Document (ValueError when unreadable); `info`: its
    `os.stat` taken before reading (the document's `updated_at` is its mtime)."""
    fmt = TEXT_SUFFIXES[path.suffix.lower()]
    info = info or path.stat()
    raw = read_text_file(path, info.st_size)
    text, language = notebook_text(raw) if fmt == "notebook" else (raw, fmt)  # its format names its language
    title = first_heading(text, fmt) or path.stem
    updated = datetime.fromtimestamp(info.st_mtime, tz=UTC)
    return Document(
        doc_id, source, collection, title, text, fmt, None, updated, {"path": doc_id}, (), language
    )


#: bumped whenever reading a file into a Document changes (text, title, dates, metadata): file
#: signatures recorded by another version are not trusted, so every file is read once more
READER_VERSION = 1

#: what changes when a file is written, replaced, copied over or has its mtime reset: (size, inode,
#: mtime ns, ctime ns); the kernel sets ctime on every change and no user call can put it back
FileSignature = tuple[int, int, int, int]


def file_signature(info: os.stat_result) -> FileSignature:
    """The signature of a file from its `os.stat`."""
    return (info.st_size, info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


@dataclass
class FolderScan:
    """A folder read against the file signatures its index recorded (`read_folder`).

    `documents`: the documents of the files read (new files, files whose signature changed or is
    not recorded); `unchanged`: `{doc_id: signature}` of the files not read because their signature
    equals the recorded one (their indexed documents stay as they are); `signatures`: the settled
    signature of each file read into a document (taken before reading it), to record."""

    source: str
    documents: list[Document] = field(default_factory=list)
    unchanged: dict[str, FileSignature] = field(default_factory=dict)
    signatures: dict[str, FileSignature] = field(default_factory=dict)


def _folder_files(root: Path) -> Iterator[tuple[str, str]]:
    """(doc id = path relative to `root` with `/`, path) of each text file under `root`, in walk
    order (folders and names sorted); plain strings: a re-index stats every file of the tree."""
    top = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        prefix = "" if dirpath == top else os.path.relpath(dirpath, top).replace(os.sep, "/") + "/"
        for name in sorted(filenames):
            if os.path.splitext(name)[1].lower() in TEXT_SUFFIXES:
                yield prefix + name, os.path.join(dirpath, name)


def read_folder(
    root: Path,
    report: IngestReport,
    recorded: dict[str, FileSignature] | None = None,
    settled_ns: int = 2_000_000_000,
) -> FolderScan:
    """The documents of a folder tree; bad files are warned about, counted and skipped.

    With `recorded` (`{doc_id: signature}` as an index recorded them), a file whose signature
    (`file_signature`: size, inode, mtime, ctime) equals its recorded one is not read: it lands in
    `unchanged`. Every other file is read. The signature of a file read is kept for recording only
    when its mtime and ctime are older than `settled_ns` before this scan began: a file written in
    the same clock tick as its signature was taken could change again without moving either (the
    "racy git" problem), so such a file stays unrecorded and is read again by the next scan."""
    resolved = root.resolve()
    scan = FolderScan(str(resolved))
    settled_before = time.time_ns() - settled_ns
    for doc_id, name in _folder_files(root):
        try:
            info = os.stat(name)
        except OSError as error:
            logger.warning("skipped %s: %s", name, error)
            report.skipped.append((name, str(error)))
            continue
        signature = file_signature(info)
        if recorded is not None and recorded.get(doc_id) == signature:
            scan.unchanged[doc_id] = signature
            continue
        path = Path(name)
        collection = doc_id.split("/", 1)[0] if "/" in doc_id else resolved.name
        try:
            document = read_document_file(path, doc_id, scan.source, collection, info)
        except (OSError, ValueError) as error:
            logger.warning("skipped %s: %s", path, error)
            report.skipped.append((str(path), str(error)))
            continue
        if not document.text.strip():
            report.skipped.append((str(path), "empty"))
            continue
        scan.documents.append(document)
        if info.st_mtime_ns < settled_before and info.st_ctime_ns < settled_before:
            scan.signatures[doc_id] = signature
    return scan


def iter_beir(folder: Path) -> Iterator[Document]:
    """Documents of a BEIR corpus (`_id`, `title`, `text`), a folder or its corpus file; collection =
    the dataset's folder name."""
    path = find_file(folder, "corpus.jsonl") if folder.is_dir() else folder
    source = str(folder.resolve())
    folder = folder if folder.is_dir() else folder.parent
    for line_number, obj in iter_jsonl(path):
        if "_id" not in obj:
            raise InvalidValueError(f"{path}:{line_number}: field '_id' is missing", field="_id")
        text = obj.get("text", "")
        if not isinstance(text, str):
            raise InvalidValueError(f"{path}:{line_number}: field 'text' must be a string", field="text")
        title = str(obj.get("title") or "")
        metadata = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
        yield Document(
            str(obj["_id"]), source, folder.name, title, text, "beir", None, None, metadata, (), "text"
        )


#: a memory's project (`metadata.project`) is its collection; one without a project is in this one
MEMORY_COLLECTION = "memories"


def memory_document(obj: dict, where: str, source: str) -> Document:
    """Validate one memory object (`id`, `content`, `tags`, `created_at`, `memory_type?`, `metadata?`)."""
    memory_id = obj.get("id")
    if not isinstance(memory_id, str) or not memory_id.strip():
        raise InvalidValueError(f"{where}: field 'id' must be a non-empty string", field="id")
    content = obj.get("content")
    if not isinstance(content, str) or not content.strip():
        raise InvalidValueError(f"{where}: field 'content' must be a non-empty string", field="content")
    if len(content) > MAX_MEMORY_CHARS:
        raise InvalidValueError(
            f"{where}: field 'content' is longer than {MAX_MEMORY_CHARS} characters", field="content"
        )
    tags = obj.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise InvalidValueError(f"{where}: field 'tags' must be a list of strings", field="tags")
    created = parse_datetime(obj.get("created_at"), where) if "created_at" in obj else None
    updated = parse_datetime(obj["updated_at"], where) if obj.get("updated_at") else created
    memory_type = obj.get("memory_type") or "note"
    if not isinstance(memory_type, str):
        raise InvalidValueError(f"{where}: field 'memory_type' must be a string", field="memory_type")
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidValueError(f"{where}: field 'metadata' must be an object", field="metadata")
    if not isinstance(metadata.get("context", ""), str):
        raise InvalidValueError(
            f"{where}: field 'metadata.context' must be a string (the turn before this one)",
            field="metadata.context",
        )
    metadata = {**metadata, "memory_type": memory_type}
    collection = str(metadata.get("project") or MEMORY_COLLECTION)
    title = content.strip().splitlines()[0][:80]
    clean_tags = tuple(dict.fromkeys(tag.strip().lower() for tag in tags if tag.strip()))
    return Document(
        memory_id.strip(),
        source,
        collection,
        title,
        content,
        "memory",
        created,
        updated,
        metadata,
        clean_tags,
        "text",
    )


def iter_memories(path: Path) -> Iterator[Document]:
    """Memories of a JSONL file; the first bad line raises ValueError with file:line and field."""
    source = str(path.resolve())
    seen: set[str] = set()
    for line_number, obj in iter_jsonl(path):
        document = memory_document(obj, f"{path}:{line_number}", source)
        if document.doc_id in seen:
            raise InvalidValueError(f"{path}:{line_number}: duplicate id {document.doc_id!r}")
        seen.add(document.doc_id)
        yield document


def read_source(path: Path, report: IngestReport) -> list[Document]:
    """All documents of one source path (folder, single file, BEIR dataset or memories JSONL)."""
    kind = source_kind(path)
    readers = {
        "beir": iter_beir,
        "irds": iter_irds,
        "memories": iter_memories,
        "folder": lambda folder: read_folder(folder, report).documents,
    }
    if kind in readers:
        documents = list(readers[kind](path))
    else:
        try:
            documents = [
                read_document_file(path, path.name, str(path.resolve()), path.parent.name or "files")
            ]
        except (OSError, ValueError) as error:  # one file given by name: an error naming it, not a skip
            raise InvalidValueError(f"{path}: {error}") from None
    report.documents += len(documents)
    return documents
