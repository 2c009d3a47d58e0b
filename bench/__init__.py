"""Benchmarks and drills (see README.md here). Each prints its figure against a reference
run in the same run. Run from a checkout: `python -m bench.<name>`. Development only, like
testkit/: above the commands and the test support, imported by nothing shipped (the
`benchmarks-stay-out` contract of .importlinter)."""
