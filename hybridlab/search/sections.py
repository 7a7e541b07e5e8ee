"""A document's header sections, for reading a long document a section at a time (`get_document`).

Markdown (and notebooks) and reST documents are cut at their headings of the levels the index
chunks by (`ChunkConfig.header_levels`, default 1 and 2), with the parser the chunker uses; other
documents are one section. Sections are contiguous: together they are the text, each character once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hybridlab.errors import InvalidValueError
from hybridlab.ingest.chunking import markdown_headings, rst_headings

__all__ = ["Section", "document_sections", "find_section"]

PATH_SEPARATOR = " > "


@dataclass(frozen=True)
class Section:
    """Characters start..end of a document under one heading; `path`: its heading titles, outermost first."""

    index: int
    path: tuple[str, ...]
    start: int
    end: int

    @property
    def title(self) -> str:
        return PATH_SEPARATOR.join(self.path) or "(before the first heading)"


def document_sections(text: str, doc_type: str, levels: Sequence[int] = (1, 2)) -> list[Section]:
    """The sections of a document's text, in order, covering it exactly."""
    parse = {"markdown": markdown_headings, "notebook": markdown_headings, "rst": rst_headings}.get(doc_type)
    headings = parse(text) if parse and text else []
    deepest = max(levels, default=2)
    stack: dict[int, str] = {}
    cuts: list[tuple[int, tuple[str, ...]]] = [(0, ())]
    for offset, level, title in headings:
        if level > deepest:
            continue
        stack = {lvl: t for lvl, t in stack.items() if lvl < level} | {level: title}
        path = tuple(stack[lvl] for lvl in sorted(stack))
        if offset == cuts[-1][0]:
            cuts[-1] = (offset, path)
        else:
            cuts.append((offset, path))
    bounds = [start for start, _ in cuts] + [len(text)]
    spans = [(bounds[i], bounds[i + 1], cuts[i][1]) for i in range(len(cuts)) if bounds[i] < bounds[i + 1]]
    return [Section(i, path, start, end) for i, (start, end, path) in enumerate(spans)] or [
        Section(0, (), 0, 0)
    ]


def find_section(sections: Sequence[Section], wanted: int | str) -> Section:
    """The section numbered `wanted` (0-based; a digit string too), else the one whose path (titles
    joined by " > ") or own title is `wanted`, ignoring case; ValueError naming a few otherwise."""
    if isinstance(wanted, str) and wanted.strip().isdigit():
        wanted = int(wanted)
    if isinstance(wanted, int):
        if 0 <= wanted < len(sections):
            return sections[wanted]
        raise InvalidValueError(
            f"section {wanted} does not exist: this document has sections 0..{len(sections) - 1}",
            field="section",
        )
    key = wanted.strip().lower()
    for match in (lambda s: s.title.lower() == key, lambda s: bool(s.path) and s.path[-1].lower() == key):
        found = next((s for s in sections if match(s)), None)
        if found is not None:
            return found
    shown = ", ".join(repr(s.title) for s in sections[:5])
    raise InvalidValueError(
        f"no section titled {wanted!r}; give its number (0..{len(sections) - 1}) or a title, e.g. {shown}",
        field="section",
    )
