"""get_document by header sections (issue 32 item 5), driven by the SDK's client: the Panel release
notes of the HoloViz corpus (~307k characters, the corpus' longest page) read section by section,
page by page, with no character lost or repeated and every response under ~10k characters."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from hybridlab.eval.evalsets import corpora_dir
from hybridlab.search.sections import document_sections, find_section

RELEASES = corpora_dir() / "holoviz" / "panel" / "doc" / "about" / "releases.md"
RESPONSE_CHARS = 10_000


def test_sections_cover_the_text_once():
    text = "intro\n# A\n\none\n## B\n\ntwo\n### deep\n\nthree\n# C\n\nfour\n"
    sections = document_sections(text, "markdown")
    assert [s.title for s in sections] == ["(before the first heading)", "A", "A > B", "C"]
    assert "".join(text[s.start : s.end] for s in sections) == text
    assert find_section(sections, "b").index == 2 and find_section(sections, "A > B").index == 2
    assert find_section(sections, "3").title == "C" and find_section(sections, 0).start == 0
    for wanted, message in [(9, "sections 0..3"), ("nope", "no section titled 'nope'")]:
        with pytest.raises(ValueError, match=message):
            find_section(sections, wanted)
    assert [(s.start, s.end) for s in document_sections("plain # text", "text")] == [(0, 12)]
    assert document_sections("", "markdown")[0].end == 0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not RELEASES.is_file():
        pytest.skip(f"no HoloViz corpus at {RELEASES.parents[3]} (set HYBRIDLAB_CORPORA)")
    from hybridlab.config import IndexConfig
    from hybridlab.index.write.build import index_paths
    from hybridlab.server.mcp import create_server

    folder = tmp_path_factory.mktemp("mcp-sections")
    (folder / "docs").mkdir()
    shutil.copy(RELEASES, folder / "docs" / "releases.md")
    # the fastest encoder: paging reads no vector
    index_paths([folder / "docs"], folder / "index", IndexConfig(models=("wordllama",)), progress=False)
    return create_server(folder / "index")


def data(result) -> dict:
    assert not result.is_error, result.content[0].text
    assert len(result.content[0].text) < RESPONSE_CHARS
    return result.structured_content


def test_the_panel_release_notes_read_by_section_exactly(server):
    from mcp import Client

    original = server.service.index.get_document("releases.md").text
    assert len(original) > 300_000

    async def session() -> None:
        async with Client(server) as client:
            first = data(await client.call_tool("get_document", {"doc_id": "releases.md"}))
            count = first["section_count"]
            assert count > 100 and first["sections"][1] == "1. Releases > Version 1.9.4"
            assert first["sections"][-1].startswith("…") and first["remaining_chars"] == len(original) - 8_000
            pages, section, offset, sections_read = [], 0, 0, 0
            while section is not None:
                page = data(
                    await client.call_tool(
                        "get_document",
                        {"doc_id": "releases.md", "section": section, "offset": offset, "max_chars": 3_000},
                    )
                )
                pages.append(page["text"])
                assert page["remaining_chars"] == len(original) - len("".join(pages))
                if page["next_offset"] is not None:
                    offset = page["next_offset"]
                else:
                    section, offset, sections_read = page["next_section"], 0, sections_read + 1
            assert "".join(pages) == original and sections_read == count
            by_title = data(
                await client.call_tool("get_document", {"doc_id": "releases.md", "section": "Version 1.9.3"})
            )
            assert by_title["section"] == "Releases > Version 1.9.3" and by_title["text"].startswith(
                "## Version 1.9.3"
            )
            refused = await client.call_tool(
                "get_document", {"doc_id": "releases.md", "section": "Version 0.0.0"}
            )
            assert refused.is_error and "no section titled" in refused.content[0].text

    asyncio.run(session())
