"""Hyper-parameter search with Optuna, one module per job; import each name from its module.

See docs/internals/tune-eval.md#sweeps. A sweep (`notebooks/sweep.ipynb`, run by `hybridlab sweep`):

- :mod:`.space` — the search space: :class:`~.space.Param`, the space of each set, a trial's
  parameters as search settings and an index config, the defaults expressed in a space;
- :mod:`.objective` — the value of one trial on the tuning split (or a fold's queries);
- :mod:`.storage` — where a study lives (SQLite, a journal file, a database server);
- :mod:`.study` — `run_study`: create or join a study and work until it holds its trials;
- :mod:`.workers` — worker processes on one study, and the settings they share;
- :mod:`.crossval` — `cross_validate`: nested cross-validation of a cross-validated set;
- :mod:`.finalize` — `finalize`: the sweep's record (:class:`hybridlab.tune.record.SweepRecord`);
- :mod:`.progress` and :mod:`.figures` — what a person sees: progress, and the study's figures.

The run folder the sweep writes into is :mod:`hybridlab.tune.runs`'s; its `summary.md` is
:mod:`hybridlab.tune.summary`'s."""
