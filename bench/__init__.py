"""Performance benchmarks of hybridlab, side by side with the alternatives (issue 8).

    python -m bench [--quick]        # or: make bench / make bench-quick

Parts, one module each: `latency` (query latency per mode, filtered or not, split into encoding
and search, at 10k/100k/1M chunks and on SciFact), `staged` (candidates vs latency and agreement
with parallel hybrid), `indexing` (our overhead beyond the encoder, unchanged re-index, size,
RSS), `coldstart` (CLI and MCP server), `alternatives` (ChromaDB, LanceDB, rank-bm25, bm25s on
SciFact with the same vectors), `ann` (an approximate FAISS index against exact search) and
`graph` (corpus graph: full build against the update a new generation makes).
`corpus` builds the benchmark indexes from existing vectors, `report` writes
`reports/bench/<date>/` (report.md, results.json, machine.json, targets.json, PNG plots).
"""
