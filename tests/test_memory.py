"""A body far larger than memory would like: the memory of the process serving it stays flat
while it streams, in a single process and in each HTTP worker under the supervisor."""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from testkit.server import ServerRunner, memory_kib
from testkit.telemetry import stored_count

MAC = "aa:bb:cc:00:00:0f"
RECORD_PAD = "p" * 4000
BODY_MIB = 300


def records(n_start: int, count: int) -> bytes:
    return b"".join(orjson.dumps({"timestamp": "2026-03-02T10:15:01+00:00", "event_type": "alert",
                                  "src_ip": "203.0.113.9", "src_port": n % 65536,
                                  "alert": {"signature_id": 2001219, "severity": 2},
                                  "n": n, "pad": RECORD_PAD}) + b"\n"
                    for n in range(n_start, n_start + count))


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
async def test_large_body_streams_in_flat_memory(database, tmp_path, sql, workers):
    server = ServerRunner(database, tmp_path, INGEST_MAX_BODY_BYTES=str(2 * BODY_MIB * 2**20),
                          DB_LOG_LEVEL="error", HTTP_WORKERS=str(workers)).start()
    serving = server.children("serving") if workers > 1 else [server.process.pid]
    try:
        headers = {"X-ID": MAC, "Content-Type": "application/x-ndjson"}
        async with aiohttp.ClientSession() as session:
            warm = await session.post(f"{server.url}/log/events", data=records(0, 200),
                                      headers=headers)
            assert warm.status == 200
            baseline_kib = {pid: memory_kib(pid, "VmRSS") for pid in serving}
            chunk = records(0, 1000)  # ~4 MiB, sent again and again
            repeats = BODY_MIB * 2**20 // len(chunk)

            async def body():
                for _ in range(repeats):
                    yield chunk

            response = await session.post(f"{server.url}/log/events", data=body(),
                                          headers=headers)
            reply = await response.json()
        assert response.status == 200, reply
        assert reply["accepted"] == repeats * 1000
        growth_mib = max(memory_kib(pid, "VmHWM") - baseline_kib[pid] for pid in serving) / 1024
        # The body is ~300 MiB; the server may grow by a few batches, never by the body.
        print(f"peak growth of the serving process while streaming {BODY_MIB} MiB "
              f"({workers} HTTP workers): {growth_mib:.1f} MiB")
        assert growth_mib < 40, f"server grew by {growth_mib:.0f} MiB"
        assert stored_count(sql) == 200 + repeats * 1000
    finally:
        server.stop()
