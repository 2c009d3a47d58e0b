"""What the tests and the benchmarks share to run the service for real: throw-away
PostgreSQL databases (embedded, or a given server), the server as a child process, the
corpus and fixture rulesets, rule archives served over HTTP, a TCP proxy that can cut the
database off.

Development only: not installed with the package, imported from a checkout by `tests/`
and `ops/bench/`. May import anything; nothing shipped imports it (import-linter checks).
"""

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
CORPUS = REPOSITORY.parent / "shared" / "corpus"
FIXTURES = REPOSITORY / "tests" / "fixtures"
