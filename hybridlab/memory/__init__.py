"""The memories of an index, as an assistant keeps them: one service that stores (deduplicated, exact
and near, within the memory's project), updates, deletes, lists and re-opens the index after each
write. The MCP tools and `hybridlab memories` are adapters over :class:`MemoryService`; this layer sits
above search (it reads the index for duplicates) and the index's write path (it writes)."""

from hybridlab.memory.service import (
    ALL_PROJECTS,
    MEMORY_CHUNK_TYPES,
    NEAR_THRESHOLD,
    Deletion,
    MemoryFilters,
    MemoryPage,
    MemoryService,
    ProjectScope,
    StoreOutcome,
    Updated,
    check_project,
)

__all__ = [
    "ALL_PROJECTS",
    "MEMORY_CHUNK_TYPES",
    "NEAR_THRESHOLD",
    "Deletion",
    "MemoryFilters",
    "MemoryPage",
    "MemoryService",
    "ProjectScope",
    "StoreOutcome",
    "Updated",
    "check_project",
]
