"""Searching an opened index: the engine (`Index`), the snapshot of one generation, the pipeline of
search steps, the retriever protocols and their local implementation, fusion, tags, filters."""
