"""Evaluation: datasets, evaluation sets, runs and metrics."""
