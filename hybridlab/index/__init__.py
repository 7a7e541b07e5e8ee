"""The on-disk index: layout, store, BM25, FAISS, corpus graph; how it is written and read."""
