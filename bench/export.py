"""Export benchmark: one router's stored records read back as NDJSON, against PostgreSQL
`COPY ... TO STDOUT` of the same records from a row table, in the same run.

    python -m bench.export [--records 500000]

Stores --records EVE records (the storage benchmark's stream: the corpus and variants of it)
for one router in chunks of 1,000 with their summaries (as the compaction job leaves them),
and the same records one row each in the ingestion benchmark's reference table
`(mac, received_at, record jsonb)`. Then times
`router-backend telemetry export --mac MAC` (the command, a process of its own, writing to a
file) and COPY of the row table's records to a file, best of --rounds each, and checks the
export holds every record once.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench.storage import record_stream
from bench.ingest import copy_rows, copy_text
from server.db.connect import connect
from testkit.database import database_env, throwaway_database
from testkit.telemetry import store_uploads

MAC = "02:32:00:00:ee:01"


def store(location, lines: list[bytes]) -> None:
    start = datetime.now(timezone.utc) - timedelta(hours=12)
    uploads = [(MAC, start + timedelta(seconds=n // 1_000), lines[n:n + 1_000])
               for n in range(0, len(lines), 1_000)]
    conn = connect(location)
    try:
        with conn.transaction(), conn.cursor() as cur:
            store_uploads(cur, "events", uploads, 1_000)
            copy_rows(cur, copy_text(lines, start.isoformat(), MAC))
    finally:
        conn.close()


def time_export(location, workdir: Path, out: Path) -> float:
    env = {**os.environ, **database_env(location), "DATA_DIR": str(workdir)}
    started = time.perf_counter()
    with out.open("wb") as sink:
        subprocess.run([sys.executable, "-m", "ops.cli", "telemetry", "export", "--mac", MAC],
                       env=env, stdout=sink, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def time_copy(location, out: Path) -> float:
    conn = connect(location)
    try:
        with conn.cursor() as cur, out.open("wb") as sink:
            started = time.perf_counter()
            with cur.copy("COPY (SELECT record FROM copy_reference WHERE mac = "
                          f"'{MAC}' ORDER BY received_at) TO STDOUT") as copy:
                for data in copy:
                    sink.write(data)
            return time.perf_counter() - started
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    lines = [line for _, line in record_stream(args.records)]
    with throwaway_database() as (location, workdir), \
            tempfile.TemporaryDirectory() as folder:
        store(location, lines)
        exported, copied = Path(folder) / "export.ndjson", Path(folder) / "copy.txt"
        export_times, copy_times = [], []
        for _ in range(args.rounds):
            export_times.append(time_export(location, workdir, exported))
            copy_times.append(time_copy(location, copied))
        got = exported.read_bytes().splitlines()
        if got != lines:
            raise RuntimeError(f"export gave {len(got)} lines, not the {len(lines)} stored")
    export_rate, copy_rate = args.records / min(export_times), args.records / min(copy_times)
    print(f"{args.records:,} records of one router, best of {args.rounds}:")
    print(f"  telemetry export (the command, start-up included): {export_rate:10,.0f} records/s")
    print(f"  COPY TO STDOUT of the row table's jsonb:            {copy_rate:10,.0f} records/s")
    print(f"  ratio export/COPY: {export_rate / copy_rate:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
