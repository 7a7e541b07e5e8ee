"""`memories list|update|delete` and `export`: the memory lifecycle of the MCP server on the
command line, over the same library service (:class:`hybridlab.memory.MemoryService`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from hybridlab.cli.options import UsageError, index_arg, positive_int
from hybridlab.errors import InvalidValueError

if TYPE_CHECKING:  # imported where a command runs: `hybridlab --help` loads no index code
    from hybridlab.memory import MemoryService
    from hybridlab.search.engine import StoredDocument


def add_memories(sub: argparse._SubParsersAction) -> None:
    """The `memories list|update|delete` command."""
    p = sub.add_parser(
        "memories", help="list, update or delete the memories of an index (what the MCP tools do)"
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    q = actions.add_parser("list", help="memories newest first (id, time, tags, title)")
    _memory_filters(q)
    q.add_argument("--limit", type=positive_int, help="at most this many (default all)")
    q = actions.add_parser(
        "delete", help="delete memories by id, or by --tag/--since/--until (durable on return)"
    )
    q.add_argument("ids", nargs="*", metavar="ID")
    _memory_filters(q)
    q.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete nothing")
    q = actions.add_parser(
        "update", help="replace a memory's content, tags and/or type (same id, re-embedded)"
    )
    q.add_argument("id", metavar="ID")
    index_arg(q)
    q.add_argument("--content")
    q.add_argument("--tags", help="comma-separated; replaces the memory's tags ('' = none)")
    q.add_argument("--type", help="memory type, e.g. note, fact, preference, decision")
    q.add_argument("--move-to", metavar="PROJECT", help="move the memory to this project")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_memories)


def _memory_filters(q: argparse.ArgumentParser) -> None:
    """The index and the filters of `memories list` and `memories delete`."""
    index_arg(q)
    q.add_argument(
        "--tag", action="append", dest="tags", metavar="TAG", help="only memories with the tag (repeatable)"
    )
    q.add_argument(
        "--match", choices=("all", "any"), default="all", help="with several --tag: all (default) or any"
    )
    q.add_argument("--since", help="only memories updated at or after this ISO-8601 time")
    q.add_argument("--until", help="only memories updated at or before this ISO-8601 time")
    q.add_argument(
        "--project",
        metavar="NAME",
        help="only this project's memories, ids included (default: every project)",
    )
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_memories)


def _memories(
    service: MemoryService, args: argparse.Namespace, limit: int | None = None
) -> Iterator[StoredDocument]:
    """The memories under `args`' tag, date and project filters, newest first (none of a project the
    index does not have)."""
    from hybridlab.memory import MemoryFilters

    filters = MemoryFilters(tuple(args.tags or ()), args.match, args.since, args.until)
    return service.memories(filters, _project(args), limit)


def _service(args: argparse.Namespace) -> MemoryService:
    """The memory service of `--index`: no default project, so a command without `--project` covers
    every project."""
    from hybridlab.memory import MemoryService

    return MemoryService.open(args.index_dir)


def _project(args: argparse.Namespace) -> str | None:
    """`--project` checked (a plain identifier, as the MCP tools take it); None: every project."""
    from hybridlab.memory import check_project

    project = getattr(args, "project", None)
    try:
        return None if project is None else check_project(project)
    except InvalidValueError as error:
        raise UsageError(f"--project: {error}") from None


def cmd_memories(args: argparse.Namespace) -> int:
    """`hybridlab memories list|update|delete`: the MCP server's memory lifecycle on the command line."""
    service = _service(args)
    if args.action == "list":
        found = list(_memories(service, args, args.limit))
        if args.json:
            from hybridlab.search.records import listed

            print(json.dumps([listed(doc, rank) for rank, doc in enumerate(found, 1)], indent=2, default=str))
            return 0
        for doc in found:
            when = doc.updated_at or doc.created_at or ""
            print(f"{doc.doc_id}  {when}  [{', '.join(doc.tags)}]  {doc.title}")
        print(f"{len(found)} memories", file=sys.stderr)
        return 0
    if args.action == "update":
        tags = None if args.tags is None else [t.strip() for t in args.tags.split(",") if t.strip()]
        stored = service.update(
            args.id, content=args.content, tags=tags, memory_type=args.type, move_to=args.move_to
        ).stored
        print(
            json.dumps(stored.to_dict())
            if args.json
            else f"updated {stored.id} (generation {stored.generation}, updated_at {stored.updated_at})"
        )
        return 0
    return _delete(service, args)


def _delete(service: MemoryService, args: argparse.Namespace) -> int:
    """`memories delete`: by ids or by filters, `--dry-run` lists what would go."""
    from hybridlab.memory import MemoryFilters

    if bool(args.ids) == bool(args.tags or args.since or args.until):
        raise UsageError("give ids, or --tag and/or --since/--until: one of the two")
    filters = None if args.ids else MemoryFilters(tuple(args.tags or ()), args.match, args.since, args.until)
    deletion = service.delete(args.ids, filters, dry_run=args.dry_run, project=_project(args))
    ids = list(deletion.ids)
    for doc_id in deletion.not_found:
        print(f"not found: {doc_id}", file=sys.stderr)
    if args.dry_run or not ids:
        print("\n".join(ids) if ids else "no memory matches", file=sys.stdout if ids else sys.stderr)
        print(
            f"{len(ids)} memories would be deleted (dry run)" if args.dry_run else "nothing deleted",
            file=sys.stderr,
        )
        return 0
    print(
        json.dumps(
            {
                "ids": ids,
                "removed": deletion.removed,
                "generation": deletion.generation,
                "not_found": list(deletion.not_found),
            }
        )
        if args.json
        else f"deleted {deletion.removed} memories (generation {deletion.generation})"
    )
    return 0


def add_export(sub: argparse._SubParsersAction) -> None:
    """The `export` command."""
    p = sub.add_parser(
        "export", help="write an index's memories as JSONL (what `hybridlab index FILE` reads back)"
    )
    index_arg(p)
    p.add_argument("-o", "--output", help="file to write (default stdout)")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace) -> int:
    """Every memory of the index as memories JSONL (oldest first), what `hybridlab index FILE` reads back."""
    from hybridlab.index.write.memory import memory_record

    service = _service(args)
    index = service.index
    args.tags, args.match, args.since, args.until, args.project = (), "all", None, None, None
    records = [memory_record(doc) for doc in _memories(service, args)][::-1]
    with (
        open(args.output, "w", encoding="utf-8") if args.output else contextlib.nullcontext(sys.stdout) as out
    ):
        out.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    others = index.stats().documents - len(records)
    print(
        f"exported {len(records)} memories"
        + (f" ({others} other documents are not memories: not exported)" if others else ""),
        file=sys.stderr,
    )
    return 0
