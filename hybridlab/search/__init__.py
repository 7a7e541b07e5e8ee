"""Searching an opened index: the engine, its pipeline steps, fusion, tags, filters."""
