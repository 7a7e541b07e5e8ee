"""Administration of a built index: `verify` (check and repair) and `qdrant` (mirror a generation
into a Qdrant collection)."""
