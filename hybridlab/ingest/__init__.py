"""Document sources and header-aware chunking."""
