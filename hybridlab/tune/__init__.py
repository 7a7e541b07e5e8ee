"""Tuning: Optuna sweeps, parameter grids, exported configs, notebooks."""
