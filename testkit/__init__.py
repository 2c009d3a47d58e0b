"""What the tests and the benchmarks share to run the service for real: throw-away
PostgreSQL databases, embedded or a given server (`database.py`), the server as a child
process (`server.py`, with the operator's command and a GET), the real corpus
(`tests/corpus`, or `../shared/corpus` beside a checkout) and fixture rulesets (`corpus.py`,
`rule_archives.py`: archives served over HTTP), stored payloads (`payloads.py`), a TCP proxy that can take the
database away or cut the network (`tcp_proxy.py`), stored telemetry read back as rows
(`telemetry.py`), waiting for a condition (`waiting.py`), the pool workers a test started and
the processes working on a directory (`workers.py`), a Citus cluster of a coordinator and workers on this machine
(`citus_cluster.py`), and real ET alerts as many routers report one attacker (`fleet.py`).

Development only: not installed with the package, imported from a checkout by `tests/`
and `bench/`. May import anything; nothing shipped imports it (import-linter checks).
"""

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
SHARED_CORPUS = REPOSITORY.parent / "shared" / "corpus"
# The real corpus: the team's copy beside the checkout when there is one, else the small copy
# kept in the repository (tests/corpus/README.md), so that a fresh clone runs on real data too.
CORPUS = SHARED_CORPUS if SHARED_CORPUS.is_dir() else REPOSITORY / "tests" / "corpus"
FIXTURES = REPOSITORY / "tests" / "fixtures"
