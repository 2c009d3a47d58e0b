"""Command-line entry points, deployment files and benchmarks."""
