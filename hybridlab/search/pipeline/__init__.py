"""One search over one snapshot, as a pipeline of small steps: one module per step, the step table
and its invariant in :mod:`hybridlab.search.pipeline.steps`, which runs them.
See docs/internals/search.md#pipeline."""
