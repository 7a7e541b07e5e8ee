"""File signatures of folder sources: which files a re-index may skip (size, inode, mtime, ctime as
recorded when the file was last read), stored beside the generation that committed them."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from hybridlab.errors import HybridlabError
from hybridlab.index.format import layout
from hybridlab.index.format.caches import WRITE_CACHES
from hybridlab.index.format.manifest import FileRecord, FileSignaturesRecord, Manifest
from hybridlab.ingest.sources import READER_VERSION, Document, FileSignature, FolderScan

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------- file signatures
#: the file signatures of a generation's folder sources: JSON `{"reader": READER_VERSION, "sources":
#: {source: {doc_id: [size, inode, mtime_ns, ctime_ns]}}}`, in the folder the manifest's
#: `file_signatures.file` names (written into the commit folder by a write that changes them)
SIGNATURES_FILE = "file-signatures.json"

Signatures = dict[str, dict[str, FileSignature]]  # {source: {doc_id: signature}}


def recorded_signatures(index_dir: str | os.PathLike, manifest: Manifest | None = None) -> Signatures:
    """`{source: {doc_id: file signature}}` the live generation recorded for its folder sources'
    files: each the signature the file had when its document was last read into the index (settled
    files only: see `read_folder`). Empty when there is no index, none was recorded, they were
    recorded by another `READER_VERSION`, or the file does not match its checksum. Do not mutate."""
    if manifest is None:
        try:
            manifest = layout.read_manifest(Path(index_dir))
        except HybridlabError:
            return {}
    info = manifest.file_signatures
    recorded = manifest.file(info.file) if info is not None else None
    if info is None or recorded is None or info.reader != READER_VERSION:
        return {}
    path = Path(index_dir) / info.file
    key = (str(path), recorded.sha256)
    known = WRITE_CACHES.signatures.get(key)
    if known is not None:
        return known
    import hashlib

    try:
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != recorded.sha256:
            raise ValueError("it does not match its sha256 in the manifest")
        table = {
            source: {doc_id: tuple(signature) for doc_id, signature in files.items()}
            for source, files in json.loads(data)["sources"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        logger.warning("not using the file signatures %s (every file is read): %s", path, error)
        return {}
    WRITE_CACHES.signatures.put(key, table)
    return table


def next_signatures(
    index_dir: Path,
    manifest: Manifest | None,
    scans: Sequence[FolderScan],
    to_insert: Sequence[Document],
    to_delete: Sequence[str],
    existing: dict[str, tuple[str, str, int]],
) -> Signatures | None:
    """The signatures this write commits; None when they are the live generation's, unchanged.

    A scanned source's are replaced: the files left unread keep their recorded signature (when it
    is still the live generation's and their document is indexed), the files read record theirs.
    Every other source keeps its own, less the documents this write inserts or deletes (whose file
    is then read by the next scan)."""
    info = manifest.file_signatures if manifest is not None else None
    touched: dict[str, set[str]] = {}
    for document in to_insert:
        touched.setdefault(document.source, set()).add(document.doc_id)
    for doc_id in to_delete:
        touched.setdefault(existing[doc_id][0], set()).add(doc_id)
    scanned = {scan.source for scan in scans}
    if not scans and not set(info.sources if info is not None else ()) & set(touched):
        return None  # e.g. a memory write: no recorded source touched
    old = recorded_signatures(index_dir, manifest) if manifest else {}
    table = {
        source: {d: s for d, s in files.items() if d not in touched.get(source, ())}
        for source, files in old.items()
        if source not in scanned
    }
    for scan in scans:
        before = old.get(scan.source, {})
        files = {
            doc_id: signature
            for doc_id, signature in scan.unchanged.items()
            if before.get(doc_id) == signature and existing.get(doc_id, ("",))[0] == scan.source
        }
        files.update(
            (d.doc_id, scan.signatures[d.doc_id]) for d in scan.documents if d.doc_id in scan.signatures
        )
        table[scan.source] = files
    table = {source: files for source, files in table.items() if files}
    return None if table == old else table


def commit_signatures(
    index_dir: Path, old: Manifest | None, table: Signatures | None, folder: Path, name: str, live: set[str]
) -> tuple[FileSignaturesRecord | None, FileRecord | None]:
    """The manifest's `file_signatures` for a commit into `folder` (becoming `name`) whose live
    segments are `live`, and the `files` entry of a signatures file kept where it is (None: written
    now). `table` None keeps the old generation's: by reference while their folder stays live, else
    copied into `folder`."""
    if table is None:
        info = old.file_signatures if old is not None else None
        if old is None or info is None:
            return None, None
        recorded = old.file(info.file)
        if info.file.split("/")[0] in live and recorded:
            return info, recorded
        table = recorded_signatures(index_dir, old)
    if not table:
        return None, None
    payload = {
        "reader": READER_VERSION,
        "sources": {
            source: {doc_id: list(signature) for doc_id, signature in sorted(files.items())}
            for source, files in sorted(table.items())
        },
    }
    (folder / SIGNATURES_FILE).write_text(json.dumps(payload, separators=(",", ":")), encoding="utf-8")
    return FileSignaturesRecord(
        f"{name}/{SIGNATURES_FILE}",
        READER_VERSION,
        {source: len(files) for source, files in sorted(table.items())},
    ), None
