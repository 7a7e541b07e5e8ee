"""Reports over sweeps and evaluations."""
