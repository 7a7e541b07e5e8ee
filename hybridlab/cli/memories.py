"""`memories list|update|delete` and `export`: the memory lifecycle of the MCP server on the
command line."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from hybridlab.cli.options import UsageError, index_arg, positive_int
from hybridlab.errors import InvalidValueError


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


def _memory_pages(index, args: argparse.Namespace, limit: int | None = None):
    """The memories under `args`' tag, date and project filters, newest first, a page of up to 500
    at a time (none of a project the index does not have)."""
    project = _project(args)
    if project is not None and project not in index.known_collections:
        return
    cursor, left = None, limit
    while True:
        page, cursor = index.list_documents(
            collection=project,
            tags=args.tags or (),
            match=args.match,
            since=args.since,
            until=args.until,
            chunk_types=("memory",),
            limit=500 if left is None else min(500, left),
            cursor=cursor,
        )
        yield from page
        if left is not None:
            left -= len(page)
        if cursor is None or not page or (left is not None and left <= 0):
            return


def _project(args: argparse.Namespace) -> str | None:
    """`--project` checked (a plain identifier, as the MCP tools take it); None: every project."""
    from hybridlab.index.write.memory import check_project

    project = getattr(args, "project", None)
    try:
        return None if project is None else check_project(project)
    except InvalidValueError as error:
        raise UsageError(f"--project: {error}") from None


def cmd_memories(args: argparse.Namespace) -> int:
    """`hybridlab memories list|update|delete`: the MCP server's memory lifecycle on the command line."""
    from hybridlab.index.write.memory import MemoryWriter
    from hybridlab.search.engine import open_index

    index = open_index(args.index_dir)
    if args.action == "list":
        found = list(_memory_pages(index, args, args.limit))
        if args.json:
            print(json.dumps(found, indent=2, default=str))
            return 0
        for doc in found:
            when = doc.get("updated_at") or doc.get("created_at") or ""
            print(f"{doc['doc_id']}  {when}  [{', '.join(doc['tags'])}]  {doc['title']}")
        print(f"{len(found)} memories", file=sys.stderr)
        return 0
    writer = MemoryWriter(args.index_dir)
    if args.action == "update":
        tags = None if args.tags is None else [t.strip() for t in args.tags.split(",") if t.strip()]
        stored = writer.update(
            index.get_document(args.id),
            content=args.content,
            tags=tags,
            memory_type=args.type,
            project=args.move_to,
        )
        print(
            json.dumps(stored.to_dict())
            if args.json
            else f"updated {stored.id} (generation {stored.generation}, updated_at {stored.updated_at})"
        )
        return 0
    if bool(args.ids) == bool(args.tags or args.since or args.until):
        raise UsageError("give ids, or --tag and/or --since/--until: one of the two")
    if args.ids:
        from hybridlab.search.listing import memories_by_id

        try:
            ids, missing = memories_by_id(index, args.ids, _project(args))
        except ValueError as error:
            raise UsageError(str(error)) from None
    else:
        ids, missing = [doc["doc_id"] for doc in _memory_pages(index, args)], []
    for doc_id in missing:
        print(f"not found: {doc_id}", file=sys.stderr)
    if args.dry_run or not ids:
        print("\n".join(ids) if ids else "no memory matches", file=sys.stdout if ids else sys.stderr)
        print(
            f"{len(ids)} memories would be deleted (dry run)" if args.dry_run else "nothing deleted",
            file=sys.stderr,
        )
        return 0
    deleted = writer.delete(ids)
    print(
        json.dumps(
            {"ids": ids, "removed": deleted.removed, "generation": deleted.generation, "not_found": missing}
        )
        if args.json
        else f"deleted {deleted.removed} memories (generation {deleted.generation})"
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
    from hybridlab.search.engine import open_index

    index = open_index(args.index_dir)
    args.tags, args.match, args.since, args.until, args.project = (), "all", None, None, None
    records = [memory_record(doc) for doc in _memory_pages(index, args)][::-1]
    with (
        open(args.output, "w", encoding="utf-8") if args.output else contextlib.nullcontext(sys.stdout) as out
    ):
        out.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)
    others = index.stats()["documents"] - len(records)
    print(
        f"exported {len(records)} memories"
        + (f" ({others} other documents are not memories: not exported)" if others else ""),
        file=sys.stderr,
    )
    return 0
