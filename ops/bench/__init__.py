"""Benchmarks and drills (see README.md here). Each prints its figure against a reference
run in the same run. Run from a checkout: `python -m ops.bench.<name>`."""
