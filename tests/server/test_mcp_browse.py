"""Responses that fit and documentation to browse (issue 32 items 5 and 6), driven by the SDK's client:
`search` content modes under a character budget, `get_document` paged with no character lost or
repeated, `list_collections` and `list_documents` with a prefix and a cursor."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MEMORIES = REPO / "ground_truth" / "memories" / "memories.jsonl"
RESPONSE_CHARS = 10_000  # what the defaults keep a response under

pytestmark = pytest.mark.slow  # builds a real index with a 120k-character document


def release_notes() -> str:
    """A long synthetic document (over 120k characters, multi-byte characters included)."""
    lines = ["# Release notes", ""]
    n = 0
    while sum(len(line) + 1 for line in lines) < 121_000:
        lines += [
            f"## Version 1.{n}",
            "",
            f"Fixed widget {n} rendering — café ü 🚀 and layout number {n * 7} in the Linked Brushing demo.",
            "",
        ]
        n += 1
    return "\n".join(lines)


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory) -> Path:
    from hybridlab.index.write.build import index_paths

    folder = tmp_path_factory.mktemp("mcp-browse")
    docs = folder / "docs"
    (docs / "guide").mkdir(parents=True)
    (docs / "guide" / "release.md").write_text(release_notes(), encoding="utf-8")
    (docs / "guide" / "intro.md").write_text(
        "# Intro\n\nA short introduction to widgets.\n", encoding="utf-8"
    )
    (docs / "faq.md").write_text("# FAQ\n\nQuestions about templates and widgets.\n", encoding="utf-8")
    memories = folder / "memories.jsonl"
    memories.write_text(
        "".join(MEMORIES.read_text(encoding="utf-8").splitlines(keepends=True)[:20]), encoding="utf-8"
    )
    index_paths([docs, memories], folder / "index", progress=False)
    return folder / "index"


@pytest.fixture(scope="module")
def server(index_dir):
    from hybridlab.server.mcp import create_server

    return create_server(index_dir)


async def call(client, tool: str, **arguments):
    return await client.call_tool(tool, arguments)


def data(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def test_get_document_pages_a_long_document_exactly(server):
    from mcp import Client

    original = server.service.index.get_document("guide/release.md").text
    assert len(original) > 120_000

    async def session() -> None:
        async with Client(server) as client:
            first = await call(client, "get_document", doc_id="guide/release.md")
            assert len(first.content[0].text) < RESPONSE_CHARS  # the default page fits
            pages, offset = [], 0
            while offset is not None:
                page = data(
                    await call(
                        client, "get_document", doc_id="guide/release.md", offset=offset, max_chars=7_777
                    )
                )
                assert page["offset"] == offset and page["total_chars"] == len(original)
                assert len(page["text"]) <= 7_777
                pages.append(page["text"])
                offset = page["next_offset"]
            assert "".join(pages) == original and len(pages) == -(-len(original) // 7_777)
            short = data(await call(client, "get_document", doc_id="guide/intro.md"))
            assert short["next_offset"] is None and short["total_chars"] == len(short["text"])
            end = data(
                await call(client, "get_document", doc_id="guide/intro.md", offset=short["total_chars"])
            )
            assert end["text"] == "" and end["next_offset"] is None
            for arguments, message in [
                ({"offset": len(original) + 1}, "past the end"),
                ({"offset": -1}, "greater than or equal to 0"),
                ({"max_chars": 0}, "greater than or equal to 1"),
            ]:
                refused = await call(client, "get_document", doc_id="guide/release.md", **arguments)
                assert refused.is_error and message in refused.content[0].text, arguments

    asyncio.run(session())


def test_search_content_modes_fit_the_budget(server):
    from mcp import Client

    original = server.service.index.get_document("guide/release.md").text

    async def session() -> None:
        async with Client(server) as client:
            snippets = data(await call(client, "search", query="widget rendering Linked Brushing", limit=3))
            assert snippets["results"][0]["doc_id"] == "guide/release.md"
            assert all(hit["snippet"] and hit["text"] is None for hit in snippets["results"])

            chunks = data(
                await call(
                    client, "search", query="widget rendering Linked Brushing", limit=3, content="chunk"
                )
            )
            top = chunks["results"][0]
            assert top["text"] in original and "Version" in top["text"] and top["snippet"] == ""

            full = await call(
                client, "search", query="widget rendering Linked Brushing", limit=10, content="full"
            )
            assert len(full.content[0].text) < RESPONSE_CHARS  # the default budget
            hits = data(full)["results"]
            assert sum(len(hit["text"]) for hit in hits) <= 5_000
            release = next(hit for hit in hits if hit["doc_id"] == "guide/release.md")
            assert release["truncated"] and original.startswith(release["text"])
            intro = next(hit for hit in hits if hit["doc_id"] == "guide/intro.md")
            assert (
                not intro["truncated"]
                and intro["text"] == server.service.index.get_document("guide/intro.md").text
            )

            bigger = data(
                await call(
                    client,
                    "search",
                    query="widget rendering Linked Brushing",
                    limit=2,
                    content="full",
                    max_chars=30_000,
                )
            )["results"]
            assert sum(len(hit["text"]) for hit in bigger) <= 30_000
            assert len(next(h for h in bigger if h["doc_id"] == "guide/release.md")["text"]) > 20_000
            small = data(await call(client, "search", query="widget", limit=5, max_chars=100))["results"]
            assert sum(len(hit["snippet"]) for hit in small) <= 100
            refused = await call(client, "search", query="widget", content="everything")
            assert refused.is_error

    asyncio.run(session())


def test_list_collections_and_documents(server):
    from mcp import Client

    async def session() -> None:
        async with Client(server) as client:
            listed = data(await call(client, "list_collections"))
            by_name = {c["name"]: c for c in listed["collections"]}
            assert listed["count"] == len(by_name) and {"guide", "docs"} <= set(by_name)
            assert by_name["guide"]["documents"] == 2 and set(by_name["guide"]["chunk_types"]) == {"text"}
            assert by_name["guide"]["chunks"] > 2  # the release notes are many chunks
            memory_collections = [c for c in listed["collections"] if "memory" in c["chunk_types"]]
            assert sum(c["documents"] for c in memory_collections) == 20
            tagged = next(c for c in memory_collections if c["tags"])
            assert all(count >= 1 for count in tagged["tags"].values()) and tagged["tag_count"] >= len(
                tagged["tags"]
            )

            guide = data(await call(client, "list_documents", collection="guide"))
            assert sorted(d["doc_id"] for d in guide["results"]) == ["guide/intro.md", "guide/release.md"]
            release = next(d for d in guide["results"] if d["doc_id"] == "guide/release.md")
            assert release["total_chars"] > 120_000 and "text" not in release
            assert [
                d["doc_id"] for d in data(await call(client, "list_documents", prefix="guide/r"))["results"]
            ] == ["guide/release.md"]

            seen, cursor = [], None
            while True:
                page = data(
                    await call(client, "list_documents", limit=6, **({"cursor": cursor} if cursor else {}))
                )
                assert page["count"] <= 6
                seen += [d["doc_id"] for d in page["results"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert len(seen) == len(set(seen)) == 23  # 3 documents and 20 memories, each once
            everything = await call(client, "list_documents", limit=100)
            assert len(everything.content[0].text) < RESPONSE_CHARS

            refused = await call(client, "list_documents", collection="nowhere")
            assert refused.is_error and "unknown collection 'nowhere'" in refused.content[0].text

    asyncio.run(session())
