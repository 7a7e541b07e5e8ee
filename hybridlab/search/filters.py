"""Metadata filters, resolved in DuckDB to the set of chunk ids a search may return."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hybridlab.errors import InvalidValueError


def parse_when(value: str | datetime | None, name: str) -> datetime | None:
    """An aware UTC datetime from ISO-8601 text (date or date-time) or a datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise InvalidValueError(f"{name}: not an ISO-8601 date: {value!r}", field=name) from None
    if not parsed.tzinfo:
        return parsed.replace(tzinfo=UTC)
    try:
        parsed.astimezone(UTC)  # the store compares in UTC: "0001-01-01T00:00+01:00" has no UTC time
    except OverflowError:
        raise InvalidValueError(
            f"{name}: {value!r} is out of range in UTC (years 1 to 9999)", field=name
        ) from None
    return parsed


def naive_utc(value: datetime) -> datetime:
    """The store keeps timestamps as naive UTC."""
    return value.astimezone(UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class Filters:
    """Which chunks a search may return. Empty filters allow everything."""

    chunk_types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    tags_any: bool = False
    collections: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    embedding_model: str | None = None
    doc_ids: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.chunk_types
            or self.tags
            or self.collections
            or self.since
            or self.until
            or self.embedding_model
            or self.doc_ids
        )

    def sql(self) -> tuple[str, list[Any]]:
        """A `SELECT chunk_id ...` query and its parameters."""
        clauses: list[str] = []
        params: list[Any] = []

        def placeholders(values: Sequence[Any]) -> str:
            params.extend(values)
            return ", ".join("?" for _ in values)

        if self.chunk_types:
            clauses.append(f"c.chunk_type IN ({placeholders(self.chunk_types)})")
        if self.collections:
            clauses.append(f"d.collection IN ({placeholders(self.collections)})")
        if self.doc_ids:
            clauses.append(f"c.doc_id IN ({placeholders(self.doc_ids)})")
        if self.since is not None:
            clauses.append("COALESCE(d.updated_at, d.created_at) >= ?")
            params.append(naive_utc(self.since))
        if self.until is not None:
            clauses.append("COALESCE(d.updated_at, d.created_at) <= ?")
            params.append(naive_utc(self.until))
        if self.tags:
            inner = placeholders(self.tags)
            if self.tags_any:
                clauses.append(f"c.chunk_id IN (SELECT chunk_id FROM tags WHERE tag IN ({inner}))")
            else:
                clauses.append(
                    f"c.chunk_id IN (SELECT chunk_id FROM tags WHERE tag IN ({inner}) "
                    f"GROUP BY chunk_id HAVING count(DISTINCT tag) = {len(set(self.tags))})"
                )
        if self.embedding_model:
            clauses.append("c.chunk_id IN (SELECT chunk_id FROM chunk_vectors WHERE model = ?)")
            params.append(self.embedding_model)
        where = " AND ".join(clauses) or "TRUE"
        return (
            f"SELECT c.chunk_id FROM chunks c JOIN documents d USING (doc_id) WHERE {where} ORDER BY c.chunk_id",
            params,
        )
