"""Preprocess benchmark: the whole job versus the peer parser alone, in one run.

    python -m bench.preprocess [--archive PATH] [--rounds 3]

Whole job: version check, copy of the archive (file:// URL), verify and extract, parse in
the process pool, weights, JSON for every file, manifest, atomic publish, each round into a
fresh RULE_DATA_DIR with a fresh pool. Peer: suricata-update's `rule.parse_file` over the
same extracted .rules files (extraction not counted for the peer). Prints the best round of
each and the ratio job/peer (below 1.0: the whole job is faster than the peer's parse alone).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from server.jobs.preprocess import run_preprocess
from server.settings import load_settings
from testkit.corpus import CORPUS_ARCHIVE

DEFAULT_ARCHIVE = CORPUS_ARCHIVE


def time_job(archive: Path, workdir: Path, round_number: int) -> tuple[float, dict]:
    (workdir / "version.txt").write_text(f"bench-{round_number}")
    settings = load_settings({
        "DATA_DIR": str(workdir), "RULE_DATA_DIR": str(workdir / f"ruledata-{round_number}"),
        "RULE_PREPROCESS_ARCHIVE_URL": archive.as_uri(),
        "RULE_PREPROCESS_VERSION_URL": (workdir / "version.txt").as_uri()}, env_file=None)
    started = time.perf_counter()
    result = asyncio.run(run_preprocess(settings, start_method="fork"))
    return time.perf_counter() - started, result.counts


def time_peer(archive: Path, workdir: Path) -> tuple[float, int]:
    from suricata.update import rule as peer
    target = workdir / "peer"
    with zipfile.ZipFile(archive) as z:
        z.extractall(target, [n for n in z.namelist() if n.endswith(".rules")])
    files = sorted(target.rglob("*.rules"))
    started = time.perf_counter()
    count = sum(len(peer.parse_file(str(path), group=path.name)) for path in files)
    return time.perf_counter() - started, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", type=Path, default=DEFAULT_ARCHIVE)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not args.archive.exists():
        print(f"archive {args.archive} not found (pass --archive)", file=sys.stderr)
        return 2
    logging.getLogger("suricata.update.rule").setLevel(logging.CRITICAL)
    job_times, peer_times = [], []
    with tempfile.TemporaryDirectory() as workdir:
        for round_number in range(args.rounds):
            seconds, counts = time_job(args.archive, Path(workdir), round_number)
            job_times.append(seconds)
            seconds, peer_count = time_peer(args.archive, Path(workdir))
            peer_times.append(seconds)
    print(f"archive: {args.archive.name}, {counts['rules']} rules ({counts['enabled']} enabled, "
          f"{counts['disabled']} disabled) in {counts['files']} files; peer parsed {peer_count}")
    print(f"whole job (extract, parse, weights, JSON, publish): {min(job_times):.3f}s "
          f"(best of {args.rounds})")
    print(f"suricata-update rule.parse_file alone:             {min(peer_times):.3f}s "
          f"(best of {args.rounds})")
    print(f"ratio job/peer: {min(job_times) / min(peer_times):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
