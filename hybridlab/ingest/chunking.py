"""Header-based chunking with a size bound.

Markdown (and notebook markdown) is parsed with markdown-it-py, so `#` lines inside code fences are
not headers. Sections are cut at the configured header levels, long sections split on paragraph
boundaries with overlap, tiny ones merged into their neighbour. Every chunk is an exact slice
`text[start_char:end_char]` of its document and the slices cover the whole document.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from hybridlab.config import ChunkConfig
from hybridlab.errors import InvalidValueError

SECTION_SEPARATOR = " › "
RST_UNDERLINE = re.compile(r"^([=\-~^\"'`#*+:.])\1{2,}\s*$")
WHITESPACE = re.compile(r"\s+")
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+\-.#]*)", re.MULTILINE)


@dataclass(frozen=True)
class Chunk:
    """One piece of a document: an exact slice of its text plus where it sits."""

    chunk_index: int
    text: str
    start_char: int
    end_char: int
    section: str
    chunk_type: str
    language: str | None


@dataclass(frozen=True)
class _Section:
    start: int
    end: int
    path: tuple[str, ...]


LINE_BREAK = re.compile(r"\r\n?|\n")  # what markdown-it counts as a line break (it normalises \r\n? to \n)


def _line_offsets(text: str) -> list[int]:
    """Char offset of the start of every line, with line breaks counted as markdown-it does."""
    return [0] + [match.end() for match in LINE_BREAK.finditer(text)]


_PARSERS = threading.local()


def _markdown_parser():
    """This thread's CommonMark parser (building one costs about as much as parsing a small file,
    and re-indexing reads every file of a folder to see which changed)."""
    parser = getattr(_PARSERS, "parser", None)
    if parser is None:
        from markdown_it import MarkdownIt

        parser = _PARSERS.parser = MarkdownIt("commonmark")
    return parser


def markdown_headings(text: str) -> list[tuple[int, int, str]]:
    """(char offset of the heading line, level, title) for every real markdown heading."""
    return list(_markdown_headings(text))


@functools.lru_cache(maxsize=64)
def _markdown_headings(text: str) -> tuple[tuple[int, int, str], ...]:
    """The parse behind :func:`markdown_headings`, kept for the last texts: reading a file asks for
    its first heading (its title) and chunking it for all of them, one parse serves both."""
    tokens = _markdown_parser().parse(text)
    offsets = _line_offsets(text)
    headings = []
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.map:
            level = int(token.tag[1])
            title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            headings.append((offsets[token.map[0]], level, title))
    return tuple(headings)


def rst_headings(text: str) -> list[tuple[int, int, str]]:
    """(offset, level, title) of reST section titles; levels follow the order adornments appear."""
    lines = LINE_BREAK.split(text)
    offsets = _line_offsets(text)
    styles: list[str] = []
    headings = []
    for i in range(len(lines) - 1):
        title, underline = lines[i].strip(), lines[i + 1]
        if title and RST_UNDERLINE.match(underline) and len(underline.strip()) >= len(title):
            overline = i > 0 and lines[i - 1].strip() == underline.strip()
            style = ("o" if overline else "") + underline.strip()[0]
            if style not in styles:
                styles.append(style)
            start = offsets[i - 1] if overline else offsets[i]
            headings.append((start, min(styles.index(style) + 1, 6), title))
    return headings


def _sections(text: str, headings: list[tuple[int, int, str]], levels: tuple[int, ...]) -> list[_Section]:
    """Cut `text` at headings of the chosen levels; each section carries its title path."""
    max_level = max(levels)
    stack: dict[int, str] = {}
    cuts: list[tuple[int, tuple[str, ...]]] = [(0, ())]
    for offset, level, title in headings:
        if level > max_level:
            continue
        stack = {lvl: t for lvl, t in stack.items() if lvl < level}
        stack[level] = title
        path = tuple(stack[lvl] for lvl in sorted(stack))
        if level in levels:
            if offset == cuts[-1][0]:
                cuts[-1] = (offset, path)
            else:
                cuts.append((offset, path))
        else:
            cuts[-1] = (cuts[-1][0], cuts[-1][1] or path)
    bounds = [start for start, _ in cuts] + [len(text)]
    return [
        _Section(bounds[i], bounds[i + 1], cuts[i][1]) for i in range(len(cuts)) if bounds[i] < bounds[i + 1]
    ]


def _merge_tiny(sections: list[_Section], min_size: int) -> list[_Section]:
    """Merge sections shorter than `min_size` characters into the following (or previous) one."""
    merged: list[_Section] = []
    pending: _Section | None = None
    for section in sections:
        if pending is not None:
            # A tiny intro ("# Tabulator" + one line) merged into its first subsection takes the
            # subsection's longer path ("Tabulator › Editors"); otherwise the tiny one's path wins.
            nested = section.path[: len(pending.path)] == pending.path
            section = _Section(
                pending.start, section.end, section.path if nested else pending.path or section.path
            )
            pending = None
        if section.end - section.start < min_size:
            pending = section
        else:
            merged.append(section)
    if pending is not None:
        if merged:
            last = merged.pop()
            merged.append(_Section(last.start, pending.end, last.path))
        else:
            merged.append(pending)
    return merged


def _best_cut(text: str, start: int, limit: int, after: int = 0) -> int:
    """The latest good cut in (start, limit], past the first third of the window and past `after`:
    a paragraph break, else a newline, else a space, else `limit` itself."""
    window = text[start:limit]
    floor = max(len(window) // 3, after - start)
    for pattern in (r"\n\s*\n", r"\n", r"\s"):
        cuts = [m.end() for m in re.finditer(pattern, window) if m.end() > floor]
        if cuts:
            return start + cuts[-1]
    return limit


def split_span(text: str, start: int, end: int, chunk_size: int, overlap: int) -> list[tuple[int, int]]:
    """Split [start, end) into spans of at most `chunk_size` chars on natural boundaries; each
    span after the first starts at the first word boundary within `overlap` characters before the
    previous one ended (never before the middle of the previous span, so splitting always advances)."""
    spans: list[tuple[int, int]] = []
    position = start
    while end - position > chunk_size:
        # Each span must end past the previous one, or it would lie inside the overlap.
        cut = _best_cut(text, position, position + chunk_size, after=spans[-1][1] if spans else start)
        spans.append((position, cut))
        next_start = cut
        if overlap:
            lower = max(cut - overlap, position + (cut - position) // 2)
            space = WHITESPACE.search(text, lower, cut)
            if space is not None and space.end() < cut:
                next_start = space.end()
        position = max(next_start, position + 1)
    spans.append((position, end))
    return spans


def _chunk_kind(piece: str, default_language: str | None) -> tuple[str, str | None]:
    """`code` when most of the chunk sits in code fences (language from the fence), else `text`."""
    fences = list(FENCE.finditer(piece))
    if len(fences) < 2:
        return "text", default_language
    code_chars = 0
    language = None
    for opening, closing in zip(fences[::2], fences[1::2]):
        code_chars += closing.start() - opening.end()
        language = language or (opening.group(2) or None)
    if code_chars >= 0.5 * len(piece.strip()):
        return "code", (language or "python").lower()
    return "text", default_language


def chunk_text(
    text: str,
    config: ChunkConfig | None = None,
    *,
    fmt: str = "markdown",
    title: str = "",
    language: str | None = None,
) -> list[Chunk]:
    """Chunk one document (default config: `ChunkConfig()`). `fmt` is `markdown`, `rst` or `text`;
    empty text gives no chunks."""
    config = config or ChunkConfig()
    if not text.strip():
        return []
    parsers = {"markdown": markdown_headings, "rst": rst_headings, "text": lambda _: []}
    if fmt not in parsers:
        raise InvalidValueError(f"unknown chunk format {fmt!r}; choose from ['markdown', 'rst', 'text']")
    headings = parsers[fmt](text)
    sections = _merge_tiny(_sections(text, headings, config.header_levels), config.min_chunk_size)
    # Without an H1 the headings lack the document's name: the title heads the path
    # ("Tabulator › Editors" for a notebook whose headings start at "## Editors").
    root = () if not title or any(level == 1 for _, level, _ in headings) else (title,)
    chunks: list[Chunk] = []
    for section in sections:
        full = section.path if section.path[:1] == root else root + section.path
        path = SECTION_SEPARATOR.join(full) or title
        for start, end in split_span(
            text, section.start, section.end, config.chunk_size, config.chunk_overlap
        ):
            piece = text[start:end]
            kind, piece_language = _chunk_kind(piece, language)
            chunks.append(Chunk(len(chunks), piece, start, end, path, kind, piece_language))
    return chunks


def single_chunk(
    text: str, *, section: str = "", chunk_type: str = "text", language: str | None = None
) -> list[Chunk]:
    """A whole document as one chunk (memories, BEIR abstracts)."""
    return [Chunk(0, text, 0, len(text), section, chunk_type, language)] if text.strip() else []


#: at most this many characters of a memory's `context` are indexed with it (its end: what was said last)
MAX_CONTEXT_CHARS = 400


def embedding_text(chunk: Chunk, title: str, tags: Sequence[str] = (), context: str = "") -> str:
    """What is embedded and BM25-indexed: the section title path (or title), the document's tags
    (a `Tags: a, b` line, when given), the context (what was said just before a conversation turn,
    its last :data:`MAX_CONTEXT_CHARS` characters), then the chunk text.

    Context is document expansion with the neighbouring turn (the turn a reply answers holds the
    words a question uses; measured in docs/figures.md#memory-context); it is indexed, never returned
    as the memory's content."""
    heading = chunk.section or title
    body = chunk.text.strip()
    context = " ".join(context.split())[-MAX_CONTEXT_CHARS:]
    if context:
        body = f"{context}\n{body}"
    text = f"{heading}\n{body}" if heading and not body.startswith(heading) else body
    if tags:
        lead = f"{heading}\n" if text.startswith(f"{heading}\n") and heading else ""
        text = f"{lead}Tags: {', '.join(tags)}\n{text[len(lead) :]}"
    return text
