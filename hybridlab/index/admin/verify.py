"""Check an index folder and repair what can be rebuilt: `hybridlab verify --index DIR [--repair]`.
See docs/internals/index.md#verify."""

from __future__ import annotations

import time
from pathlib import Path

from hybridlab.errors import HybridlabError, IndexFormatError
from hybridlab.index.format import layout, store, wal
from hybridlab.index.format.manifest import Manifest
from hybridlab.index.format.tokens import TokenStore, store_folder
from hybridlab.index.reader import consistency_problems, read_generation
from hybridlab.index.write.build import apply_changes
from hybridlab.index.write.tokens import segment_texts, store_token_vectors


def _store_problems(folder: Path) -> list[str]:
    """Problems opening or reading the DuckDB store of a generation folder."""
    path = folder / layout.STORE_FILE
    if store.is_parquet_segment(folder):
        path = folder / store.parquet_file("chunks")
    elif not path.is_file():
        return [f"{path} is missing"]
    try:
        con = store.open_segment(folder)
    except store.IndexError_ as error:
        return [str(error)]
    try:
        for table in ("documents", "chunks", "tags", "chunk_vectors", "meta"):
            con.execute(f"SELECT count(*) FROM {table}").fetchone()
        con.execute("SELECT max(length(text)), max(length(embed_text)) FROM chunks").fetchone()
        con.execute("SELECT max(length(text)) FROM documents").fetchone()
    except Exception as error:  # noqa: BLE001 - any DuckDB failure means a damaged file
        return [f"{path} cannot be read ({str(error).splitlines()[0][:160]})"]
    finally:
        con.close()
    return []


def _cache_problems(path: Path) -> list[str]:
    if not path.exists():
        return []
    try:
        con = store.connect(path, read_only=True)
    except store.IndexError_ as error:
        if "another process" in str(error):
            return []  # held by a writer: busy, not broken
        return [f"embeddings cache: {error}"]
    try:
        con.execute("SELECT count(*), max(octet_length(vector)) FROM embeddings").fetchone()
    except Exception as error:  # noqa: BLE001
        return [f"embeddings cache {path} cannot be read ({str(error).splitlines()[0][:160]})"]
    finally:
        con.close()
    return []


def cache_path(index_dir: Path, manifest: Manifest) -> Path:
    """The embeddings cache of an index: its own file when present, else the (shared) one the
    manifest names, else where its own would be."""
    return layout.recorded_cache(index_dir, manifest) or Path(index_dir) / layout.CACHE_FILE


def _stores_problems(index_dir: Path, manifest: Manifest) -> list[str]:
    """Problems opening or reading the DuckDB store of any segment of the manifest."""
    return [
        problem
        for entry in manifest.segment_list
        for problem in _store_problems(Path(index_dir) / entry.name)
    ]


def _intact(index_dir: Path, folder: Path) -> Manifest | None:
    """The manifest copy of a generation folder when every file of its segments matches it and
    every store reads."""
    manifest = layout.read_generation_manifest(folder)
    if manifest is None or manifest.path != folder.name or manifest.files is None:
        return None
    if any(not (Path(index_dir) / name).is_dir() for name in manifest.folders):
        return None
    if layout.file_problems(index_dir, manifest, hash_all=True) or _stores_problems(index_dir, manifest):
        return None
    return manifest


def verify(index_dir: str | Path) -> list[str]:
    """Every problem found in the index folder; empty when it is consistent."""
    index_dir = Path(index_dir)
    if not index_dir.is_dir():
        raise layout.IndexNotFoundError(f"no index at {index_dir}")
    try:
        manifest = layout.read_manifest(index_dir)
    except HybridlabError as error:
        return [str(error)]
    problems = layout.file_problems(index_dir, manifest, hash_all=True)
    problems += _log_problems(index_dir, manifest)
    problems += _stores_problems(index_dir, manifest)
    problems += _cache_problems(cache_path(index_dir, manifest))
    if problems:
        return problems
    try:
        generation = read_generation(index_dir, check=False)
    except (layout.CorruptIndexError, IndexFormatError) as error:  # --repair rebuilds both
        return [str(error)]
    try:
        return (
            consistency_problems(generation)
            + _duplicate_problems(generation)
            + _token_problems(index_dir, manifest, generation)
        )
    finally:
        generation.store.close()


def _live_texts(generation) -> list[tuple[str, str]]:
    """(sha256, text) of every live chunk's embedded text."""
    with generation.store.connection() as con:
        return segment_texts(con)


def _token_problems(index_dir: Path, manifest: Manifest, generation) -> list[str]:
    """Token vectors of a recorded late-interaction model that cannot be read, or live chunks that
    have none (a write interrupted between its vectors and its commit never leaves that; an index
    given a late model by a config edit does). `--repair` drops unreadable shards and encodes the rest."""
    if not manifest.late:
        return []
    hashes = [sha for sha, _ in _live_texts(generation)]
    problems = []
    for name, record in manifest.late.items():
        try:
            missing = TokenStore(store_folder(index_dir, str(record.get("key")))).missing(hashes)
        except layout.CorruptIndexError as error:
            problems.append(str(error))
            continue
        if missing:
            problems.append(
                f"{len(missing)} of {len(set(hashes))} chunk texts lack token vectors of the late-interaction "
                f"model {name!r}; `hybridlab verify --repair --index {index_dir}` encodes them"
            )
    return problems


def _repair_tokens(index_dir: Path, manifest: Manifest, actions: list[str], progress: bool) -> None:
    """Drop unreadable token-vector shards, then encode every live chunk text that lacks vectors."""
    if not manifest.late:
        return
    for name, record in manifest.late.items():
        dropped = TokenStore(store_folder(index_dir, str(record.get("key")))).drop_unreadable()
        if dropped:
            actions.append(f"removed {dropped} unreadable token-vector shards of {name!r}")
    try:
        generation = read_generation(index_dir, check=False)
    except (layout.CorruptIndexError, IndexFormatError):
        return  # the rebuild below re-encodes what it needs
    try:
        texts = _live_texts(generation)
    finally:
        generation.store.close()
    encoded = store_token_vectors(index_dir, manifest.index_config, texts, progress=progress)
    for name, count in encoded.items():
        if count:
            actions.append(f"encoded the token vectors of {count} chunk texts for {name!r}")


def _duplicate_problems(generation) -> list[str]:
    """Document ids live more than once (in two segments, or twice in one): written before one id
    meant one document; `--repair` keeps the newest version of each."""
    rows = generation.store.fetchall(
        "SELECT doc_id, count(*) FROM documents GROUP BY doc_id HAVING count(*) > 1 ORDER BY doc_id LIMIT 3"
    )
    if not rows:
        return []
    listed = ", ".join(f"{doc_id!r} ({count} versions)" for doc_id, count in rows)
    return [
        (
            f"document ids held more than once: {listed}; `hybridlab verify --repair --index "
            f"{generation.index_dir}` keeps the newest version of each"
        )
    ]


def _log_problems(index_dir: Path, manifest: Manifest) -> list[str]:
    """A write-ahead log whose records end in a torn or damaged one (never acknowledged; `--repair` cuts it)."""
    contents = wal.read_wal(wal.wal_path(index_dir, manifest.generation))
    if contents.problem is None:
        return []
    return [
        (
            f"{contents.problem}; the {len(contents.records)} records before it are intact "
            f"(`hybridlab verify --repair --index {index_dir}` cuts the rest)"
        )
    ]


def repair(index_dir: str | Path, progress: bool = False) -> list[str]:
    """Repair what :func:`verify` finds; returns the actions taken (empty when nothing was wrong).

    Raises CorruptIndexError when the index cannot be repaired (the message says how to rebuild)."""
    index_dir = Path(index_dir)
    actions: list[str] = []
    if not verify(index_dir):
        return actions
    rebuild = False
    with layout.WriterLock(index_dir):
        try:
            manifest = layout.read_manifest(index_dir)
        except HybridlabError as error:
            manifest = _restore_manifest(index_dir, None, actions, reason=str(error))
        log = wal.wal_path(index_dir, manifest.generation)
        cut = wal.truncate_torn_tail(log) if log.exists() else None
        if cut:
            actions.append(f"cut the write-ahead log back to its intact records ({cut})")
        damaged_stores = [
            name for name in _damaged_files(index_dir, manifest) if Path(name).name in store.STORE_FILES
        ]
        if _stores_problems(index_dir, manifest) or damaged_stores:
            reason = (
                f"{layout.file_base(index_dir, manifest) / damaged_stores[0]} is damaged"
                if damaged_stores
                else _stores_problems(index_dir, manifest)[0]
            )
            manifest = _restore_manifest(index_dir, manifest, actions, reason=reason)
        cache = cache_path(index_dir, manifest)
        if _cache_problems(cache):
            if cache.resolve() != (index_dir / layout.CACHE_FILE).resolve():
                raise layout.CorruptIndexError(
                    f"the shared embeddings cache {cache} is corrupt; move it aside and run "
                    f"`hybridlab verify --repair --index {index_dir}` again (vectors will be re-embedded)"
                )
            aside = cache.with_name(f"{cache.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
            cache.rename(aside)
            Path(f"{cache}.wal").unlink(missing_ok=True)
            actions.append(f"moved the corrupt embeddings cache aside to {aside}")
        _repair_tokens(index_dir, manifest, actions, progress)
        rebuild = bool(verify(index_dir))
    if rebuild:
        report = apply_changes(
            index_dir,
            [],
            None,
            progress=progress,
            force=True,
            cache_path=cache_path(index_dir, layout.read_manifest(index_dir)),
        )
        actions.append(
            f"rebuilt BM25 and FAISS from DuckDB and the embeddings cache as generation "
            f"{report.generation} ({report.cache_hits} vectors from cache, {report.embedded} re-embedded)"
        )
    remaining = verify(index_dir)
    if remaining:
        raise layout.CorruptIndexError(
            f"index {index_dir} is still inconsistent after repair: {remaining[0]}; "
            "rebuild it from its sources with `hybridlab index PATHS --index DIR`"
        )
    return actions


def _damaged_files(index_dir: Path, manifest: Manifest) -> list[str]:
    generation = layout.file_base(index_dir, manifest)
    return [
        name
        for problem in layout.file_problems(index_dir, manifest, hash_all=True)
        for name in manifest.files or {}
        if problem.startswith(f"{generation / name} ")
    ]


def _restore_manifest(index_dir: Path, live: Manifest | None, actions: list[str], reason: str) -> Manifest:
    """Point the manifest at the newest intact generation (older than the live one when the live
    one is damaged); CorruptIndexError when there is none."""
    candidates = layout.generations(index_dir)
    if live is not None:
        candidates = [p for p in candidates if p.name < live.path]
    for folder in reversed(candidates):
        manifest = _intact(index_dir, folder)
        if manifest is not None:
            layout.write_manifest(index_dir, manifest)
            lost = "" if live is None else "; the changes of the later run are lost: index its sources again"
            actions.append(f"{reason}: manifest now names the intact generation {folder.name}{lost}")
            return manifest
    raise layout.CorruptIndexError(
        f"{reason}, and no intact generation with a manifest copy is left in {index_dir}; "
        f"rebuild the index from its sources: remove {index_dir} and run `hybridlab index PATHS --index {index_dir}`"
    )
