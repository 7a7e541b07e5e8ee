"""The MCP conversation of docs/mcp.md, for real: `python -m bench.mcp_transcript [CORPUS_MD]`.

Indexes the 274 demo memories and one long markdown page (default: the Panel release notes of the
HoloViz corpus, ~307k characters) into a temporary folder with the default model, starts
`hybridlab mcp` over stdio, drives it with the MCP SDK's client through the new tools (browse, page
by section, store with a near and an exact duplicate, update, search with a time range, list,
delete) and prints each call and its JSON, long strings and lists trimmed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from hybridlab.config import REPO_ROOT, apply_offline_environment

MEMORIES = REPO_ROOT / "ground_truth" / "memories" / "memories.jsonl"
EXPLAIN_SHOWN = ("dense_score", "bm25_rank", "alpha", "recency_factor", "time_range")


def trimmed(value: Any, chars: int = 140, items: int = 4) -> Any:
    """`value` with strings cut to `chars` and lists to `items` (what was cut is said)."""
    if isinstance(value, str):
        return value if len(value) <= chars else value[:chars] + f"… (+{len(value) - chars} chars)"
    if isinstance(value, list):
        kept = [trimmed(v, chars, items) for v in value[:items]]
        return kept + [f"… (+{len(value) - items} more)"] if len(value) > items else kept
    if isinstance(value, dict):
        if "dense_score" in value and "time_range" in value:  # a search's explain: a few of its keys
            value = {k: value[k] for k in EXPLAIN_SHOWN} | {
                "…": f"(+{len(value) - len(EXPLAIN_SHOWN)} more keys)"
            }
        kept = {
            k: trimmed(v, chars, items)
            for k, v in list(value.items())[: 3 * items]
            if v is not None or k == "next_cursor"
        }
        return kept | ({"…": f"(+{len(value) - 3 * items} more)"} if len(value) > 3 * items else {})
    return value


async def conversation(index_dir: Path) -> None:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "hybridlab.cli", "mcp", "--index", str(index_dir)],
        cwd=str(REPO_ROOT),
    )
    async with Client(params) as client:
        tools = (await client.list_tools()).tools
        print(f">>> list_tools()\n{[tool.name for tool in tools]}\n")

        async def call(tool: str, arguments: dict[str, Any], **trim: int) -> dict[str, Any]:
            result = await client.call_tool(tool, arguments)
            print(f">>> call_tool({tool!r}, {json.dumps(arguments)})")
            if result.is_error:
                print(f"is_error=True  {result.content[0].text}\n")
                return {}
            print(json.dumps(trimmed(result.structured_content, **trim), indent=1, ensure_ascii=False) + "\n")
            return result.structured_content

        await call("list_collections", {}, items=2)
        await call("get_document", {"doc_id": "releases.md", "max_chars": 300}, items=6)
        await call("get_document", {"doc_id": "releases.md", "section": "Version 1.9.3", "max_chars": 400})
        first = await call(
            "store_memory",
            {
                "content": "Panel 1.9.3 fixed the Tabulator regression we hit; pin "
                "panel>=1.9.3 in the dashboard repo.",
                "tags": ["panel", "deps"],
                "memory_type": "decision",
            },
        )
        await call(
            "store_memory",
            {
                "content": "Panel 1.9.3 fixed the Tabulator regression we hit, so pin "
                "panel>=1.9.3 in the dashboard repo.",
                "tags": ["panel", "deps"],
            },
        )
        await call(
            "store_memory",
            {
                "content": "panel 1.9.3 FIXED the Tabulator regression we hit;  pin "
                "panel>=1.9.3 in the dashboard repo."
            },
        )
        await call(
            "update_memory",
            {
                "memory_id": first["id"],
                "content": "Pin panel>=1.9.4 in the dashboard "
                "repo: 1.9.3 fixed the Tabulator regression, 1.9.4 the export bug.",
            },
        )
        await call(
            "search",
            {"query": "which panel version do we pin", "limit": 1, "time": "today", "explain": True},
            items=3,
        )
        await call("list_memories", {"time": "today", "limit": 5})
        await call("delete_memory", {"tags": ["deps"], "time": "today", "dry_run": True})
        await call("delete_memory", {"ids": [first["id"]]})
        await call("search", {"query": "which panel version do we pin", "limit": 2, "tags": ["deps"]})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    from hybridlab.eval.evalsets import corpora_dir
    from hybridlab.index.write.build import index_paths

    apply_offline_environment()
    page = Path(args[0]) if args else corpora_dir() / "holoviz" / "panel" / "doc" / "about" / "releases.md"
    with tempfile.TemporaryDirectory(prefix="hybridlab-transcript-") as work:
        docs = Path(work) / "docs"
        docs.mkdir()
        shutil.copy(page, docs / "releases.md")
        index_paths([MEMORIES, docs], Path(work) / "index", progress=False)
        asyncio.run(conversation(Path(work) / "index"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
