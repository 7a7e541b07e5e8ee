"""Chunking: header sections, size bound with overlap, tiny-section merging, exact slices."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybridlab.config import ChunkConfig, IndexConfig
from hybridlab.index.format.rows import chunk_document
from hybridlab.ingest.chunking import (
    SECTION_SEPARATOR,
    Chunk,
    chunk_text,
    embedding_text,
    markdown_headings,
    rst_headings,
    single_chunk,
    split_span,
)
from hybridlab.ingest.sources import Document

NO_MERGE = ChunkConfig(min_chunk_size=0)


def para(word: str, n: int) -> str:
    """A paragraph of `n` copies of `word` separated by spaces, ending in a blank line."""
    return " ".join([word] * n) + "\n\n"


def assert_exact_cover(text: str, chunks: list[Chunk]) -> None:
    """Chunks are exact slices, indexes 0..n-1, no gap, starts and ends strictly increasing."""
    assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
    assert chunks[0].start_char == 0
    assert chunks[-1].end_char == len(text)
    for chunk in chunks:
        assert chunk.text == text[chunk.start_char : chunk.end_char]
    for before, after in itertools.pairwise(chunks):
        assert after.start_char <= before.end_char, "gap between chunks"
        assert after.start_char > before.start_char
        assert after.end_char > before.end_char


# ------------------------------------------------------------------ headers
def test_markdown_splits_on_h1_and_h2_by_default():
    intro = "# Tabulator\n\n" + para("table", 60)
    editors = "## Editors\n\n" + para("editor", 60)
    h3 = "### SelectEditor\n\n" + para("select", 60)
    filters = "## Filters\n\n" + para("filter", 60)
    text = intro + editors + h3 + filters
    chunks = chunk_text(text)
    assert [(c.start_char, c.end_char) for c in chunks] == [
        (0, len(intro)),
        (len(intro), len(intro) + len(editors) + len(h3)),  # H3 stays inside its H2 section
        (len(intro) + len(editors) + len(h3), len(text)),
    ]
    assert [c.section for c in chunks] == ["Tabulator", "Tabulator › Editors", "Tabulator › Filters"]
    assert SECTION_SEPARATOR == " › "


def test_a_document_without_h1_gets_its_title_at_the_head_of_the_path():
    # like Panel's reference notebooks: no H1, the file name is the title
    text = "Intro text.\n\n#### Parameters:\n\n" + para("param", 40) + "## Editors\n\n" + para("editor", 40)
    chunks = chunk_text(text, ChunkConfig(min_chunk_size=0), title="Tabulator")
    assert [c.section for c in chunks] == ["Tabulator", "Tabulator › Editors"]
    assert embedding_text(chunks[1], "Tabulator").startswith("Tabulator › Editors\n## Editors\n")
    # an H2 named like the title is not repeated
    same = chunk_text("## Tabulator\n\n" + para("x", 40), NO_MERGE, title="Tabulator")
    assert [c.section for c in same] == ["Tabulator"]


def test_header_levels_are_configurable():
    text = "# A\n\n" + para("alpha", 60) + "## B\n\n" + para("bravo", 60) + "### C\n\n" + para("charlie", 60)
    only_h1 = chunk_text(text, ChunkConfig(header_levels=(1,)))
    assert [c.section for c in only_h1] == ["A"]
    three = chunk_text(text, ChunkConfig(header_levels=(1, 2, 3)))
    assert [c.section for c in three] == ["A", "A › B", "A › B › C"]
    assert three[2].text.startswith("### C")


def test_hash_lines_inside_code_fences_are_not_headers():
    text = (
        "# Real\n\n"
        + para("intro", 60)
        + "```python\n# not a header\nx = 1\n```\n\n"
        + "~~~bash\n## also not a header\n~~~\n\n"
        + para("tail", 60)
    )
    assert [(level, title) for _, level, title in markdown_headings(text)] == [(1, "Real")]
    chunks = chunk_text(text, NO_MERGE)
    assert len(chunks) == 1 and chunks[0].section == "Real"


def test_heading_offsets_follow_markdown_it_line_breaks():
    # A lone "\r" is a line break for markdown-it; offsets must still land on the heading line.
    text = "x\r\r# Head\r\n\r\nbody\n"
    assert markdown_headings(text) == [(3, 1, "Head")]
    chunks = chunk_text(text, NO_MERGE)
    assert [c.text for c in chunks] == ["x\r\r", "# Head\r\n\r\nbody\n"]


def test_rst_headings_levels_follow_adornment_order():
    text = (
        "=====\nTitle\n=====\n\nIntro.\n\n"
        "Part one\n--------\n\nText.\n\n"
        "Detail\n~~~~~~\n\nMore.\n\n"
        "Part two\n--------\n\nEnd.\n"
    )
    found = rst_headings(text)
    assert [(level, title) for _, level, title in found] == [
        (1, "Title"),
        (2, "Part one"),
        (3, "Detail"),
        (2, "Part two"),
    ]
    assert found[0][0] == 0  # an overlined title starts at its overline
    assert found[1][0] == text.index("Part one")
    chunks = chunk_text(text, NO_MERGE, fmt="rst")
    assert [c.section for c in chunks] == ["Title", "Title › Part one", "Title › Part two"]


def test_rst_underline_shorter_than_title_is_not_a_heading():
    assert rst_headings("A long title\n===\n\ntext\n") == []


def test_text_format_has_no_headings_and_unknown_format_is_an_error():
    chunks = chunk_text("# not parsed as markdown\n\nplain", fmt="text", title="notes")
    assert len(chunks) == 1 and chunks[0].section == "notes"
    with pytest.raises(ValueError, match="unknown chunk format 'html'.*markdown"):
        chunk_text("x", fmt="html")


# ------------------------------------------------------------------ sizes
def test_long_section_splits_on_paragraph_boundaries_with_overlap():
    # 12 paragraphs of 300 chars ("wwww " * 60 minus the last space + "\n\n") = 3,600 chars.
    body = para("wwww", 60) * 12
    text = "# Long\n\n" + body
    config = ChunkConfig(chunk_size=1000, chunk_overlap=150, min_chunk_size=0)
    chunks = chunk_text(text, config)
    assert len(chunks) >= 4
    assert all(len(c.text) <= 1000 for c in chunks)
    assert_exact_cover(text, chunks)
    for before, after in itertools.pairwise(chunks):
        assert before.text.endswith("\n\n"), "cut on a paragraph boundary"
        overlap = before.end_char - after.start_char
        assert 0 < overlap <= 150
        assert text[after.start_char - 1].isspace(), "the overlap starts at a word boundary"
    assert {c.section for c in chunks} == {"Long"}


def test_without_overlap_chunks_concatenate_to_the_text():
    text = "# Long\n\n" + para("lorem", 80) * 10
    chunks = chunk_text(text, ChunkConfig(chunk_size=600, chunk_overlap=0, min_chunk_size=0))
    assert len(chunks) > 1
    assert "".join(c.text for c in chunks) == text


def test_a_section_without_whitespace_is_cut_hard_at_chunk_size():
    spans = split_span("x" * 250, 0, 250, chunk_size=100, overlap=10)
    assert spans == [(0, 100), (100, 200), (200, 250)]


def test_tiny_sections_merge_with_a_neighbour():
    intro = "# Tabulator\n\nA table widget.\n\n"  # tiny: merged forward into its first subsection
    editors = "## Editors\n\n" + para("editor", 40)
    tiny = "## Tiny\n\nshort.\n\n"  # tiny and last: merged back into the previous section
    text = intro + editors + tiny
    chunks = chunk_text(text, ChunkConfig(min_chunk_size=100))
    assert len(chunks) == 1
    assert (chunks[0].start_char, chunks[0].end_char) == (0, len(text))
    assert chunks[0].section == "Tabulator › Editors"


def test_tiny_section_between_siblings_merges_forward_keeping_its_own_path():
    a = "## A\n\n" + para("aaa", 40)
    b = "## B\n\nb.\n\n"
    c = "## C\n\n" + para("ccc", 40)
    chunks = chunk_text(a + b + c, ChunkConfig(min_chunk_size=100))
    assert [(x.section, x.start_char) for x in chunks] == [("A", 0), ("B", len(a))]
    assert chunks[1].end_char == len(a + b + c)


def test_empty_and_blank_text_give_no_chunks():
    assert chunk_text("") == []
    assert chunk_text(" \n\t\n") == []
    assert single_chunk("   ") == []


def test_huge_document_is_chunked_within_bounds():
    block = "## Part\n\n" + para("lorem ipsum", 200) + "```python\n# comment\nx = 1\n```\n\n"
    text = "# Huge\n\n" + block * (2_000_000 // len(block) + 1)
    assert len(text) > 2_000_000
    chunks = chunk_text(text)
    assert_exact_cover(text, chunks)
    assert max(len(c.text) for c in chunks) <= 1500
    assert {c.section for c in chunks} == {"Huge › Part"}  # the tiny intro merged forward


def test_huge_document_without_any_break_is_chunked():
    text = "x" * 2_000_000
    chunks = chunk_text(text, ChunkConfig(chunk_overlap=0))
    assert len(chunks) == 1334  # ceil(2e6 / 1500)
    assert "".join(c.text for c in chunks) == text


# ------------------------------------------------------------------ chunk kinds and embedding text
def test_code_heavy_chunk_is_typed_code_with_the_fence_language():
    text = "# Example\n\n```bash\npip install panel\npanel serve app.py --show --autoreload\n```\n"
    (chunk,) = chunk_text(text, NO_MERGE, language="markdown")
    assert (chunk.chunk_type, chunk.language) == ("code", "bash")
    (prose,) = chunk_text("# Prose\n\n" + para("words", 30), NO_MERGE, language="markdown")
    assert (prose.chunk_type, prose.language) == ("text", "markdown")


def test_embedding_text_prepends_the_section_path():
    chunk = Chunk(0, "Use a SelectEditor.", 0, 19, "Tabulator › Editors", "text", None)
    assert embedding_text(chunk, "Tabulator") == "Tabulator › Editors\nUse a SelectEditor."
    untitled = Chunk(0, "  body  ", 0, 8, "", "text", None)
    assert embedding_text(untitled, "Doc title") == "Doc title\nbody"
    assert embedding_text(untitled, "") == "body"
    already = Chunk(0, "Tabulator › Editors said", 0, 24, "Tabulator › Editors", "text", None)
    assert embedding_text(already, "") == "Tabulator › Editors said"


def _document(doc_type: str, text: str, title: str = "T") -> Document:
    return Document("id", "src", "col", title, text, doc_type, language="text")


def test_beir_documents_are_single_chunks_and_long_memories_pieces():
    long_text = para("memory", 1000)  # 7,000 chars: above memory_chunk_size
    (short,) = chunk_document(_document("memory", long_text[:480]), IndexConfig())
    assert (short.text, short.chunk_type, short.section) == (long_text[:480], "memory", "")
    pieces = chunk_document(_document("memory", long_text), IndexConfig())
    # a long memory: overlapping pieces of at most memory_chunk_size (500, ~100 words) that cover
    # its text, every one a memory chunk
    assert len(pieces) > 10 and all(len(p.text) <= 500 and p.chunk_type == "memory" for p in pieces)
    assert pieces[0].start_char == 0 and pieces[-1].end_char == len(long_text)
    assert all(b.start_char < a.end_char for a, b in itertools.pairwise(pieces))  # they overlap
    assert all(long_text[p.start_char : p.end_char] == p.text for p in pieces)
    (beir,) = chunk_document(_document("beir", long_text, title="Vitamin D"), IndexConfig())
    assert (beir.text, beir.chunk_type, beir.section) == (long_text, "text", "Vitamin D")


def test_memory_pieces_have_their_own_size_and_indexes_from_before_keep_chunk_size():
    text = para("memory", 200)  # 1,400 chars
    assert len(chunk_document(_document("memory", text), IndexConfig())) == 4  # 500-char pieces
    wide = IndexConfig(chunk=ChunkConfig(memory_chunk_size=1500))
    assert len(chunk_document(_document("memory", text), wide)) == 1
    assert ChunkConfig(memory_chunk_size=100).memory_piece == (100, 25)  # overlap at most a quarter
    # a manifest written before the setting: its memories were cut at chunk_size, and stay so
    old = IndexConfig.from_manifest({"chunk": {"chunk_size": 1500, "chunk_overlap": 150}})
    assert old.chunk.memory_chunk_size is None and old.chunk.memory_piece == (1500, 150)
    with pytest.raises(ValueError, match="memory_chunk_size must be >= 50"):
        ChunkConfig(memory_chunk_size=10)


def test_whole_strategy_keeps_markdown_documents_whole():
    text = "# A\n\n" + para("a", 100) + "## B\n\n" + para("b", 100)
    chunks = chunk_document(_document("markdown", text), IndexConfig(chunk=ChunkConfig(strategy="whole")))
    assert len(chunks) == 1 and chunks[0].text == text


def test_notebook_markdown_is_chunked_by_its_headers():
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    from hybridlab.ingest.sources import notebook_text

    notebook = new_notebook(
        cells=[
            new_markdown_cell("# Plots\n\n" + para("plot", 50)),
            new_code_cell("# a comment, not a header\nplot()"),
            new_markdown_cell("## Colours\n\n" + para("colour", 50)),
        ]
    )
    text, language = notebook_text(nbformat.writes(notebook))
    document = Document("nb.ipynb", "s", "c", "Plots", text, "notebook", language=language)
    chunks = chunk_document(document, IndexConfig())
    assert [c.section for c in chunks] == ["Plots", "Plots › Colours"]
    assert "```python\n# a comment, not a header\nplot()\n```" in chunks[0].text


# ------------------------------------------------------------------ properties
MARKDOWNISH = st.lists(
    st.one_of(
        st.text(max_size=200),
        st.sampled_from(
            [
                "# H1\n",
                "## H2\n",
                "### H3\n",
                "\n\n",
                "```\n# x\n```\n",
                "\r",
                "\r\n",
                "Title\n=====\n",
                "    # indented\n",
                " ",
                "\u2028",
                "\x00",
            ]
        ),
        st.text(alphabet="ab \n#", max_size=400),
    ),
    max_size=30,
).map("".join)

CONFIGS = st.builds(
    lambda size, overlap_share, min_size, levels: ChunkConfig(
        chunk_size=size,
        chunk_overlap=int(overlap_share * (size // 2 - 1)),
        min_chunk_size=min_size,
        header_levels=levels,
    ),
    st.integers(50, 400),
    st.floats(0, 1),
    st.integers(0, 300),
    st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple),
)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=MARKDOWNISH, config=CONFIGS, fmt=st.sampled_from(["markdown", "rst", "text"]))
def test_chunks_are_exact_bounded_slices_covering_the_text(text, config, fmt):
    chunks = chunk_text(text, config, fmt=fmt)
    if not text.strip():
        assert chunks == []
        return
    assert_exact_cover(text, chunks)
    assert all(0 < len(c.text) <= config.chunk_size for c in chunks)
    if config.chunk_overlap == 0:
        assert "".join(c.text for c in chunks) == text
    for before, after in itertools.pairwise(chunks):
        assert before.end_char - after.start_char <= config.chunk_overlap


@settings(max_examples=60, deadline=None, database=None)
@given(text=st.text(min_size=1, max_size=3000))
def test_any_unicode_text_with_default_config(text):
    chunks = chunk_text(text)
    if text.strip():
        assert_exact_cover(text, chunks)
        assert all(len(c.text) <= 1500 for c in chunks)


def test_chunk_offsets_survive_windows_line_endings():
    text = (
        "# A\r\n\r\n"
        + para("a", 60).replace("\n", "\r\n")
        + "## B\r\n\r\n"
        + para("b", 60).replace("\n", "\r\n")
    )
    chunks = chunk_text(text, NO_MERGE)
    assert [c.section for c in chunks] == ["A", "A › B"]
    assert re.match(r"## B", chunks[1].text)
