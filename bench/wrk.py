"""Driving the server with wrk (Debian package `wrk`): a Python client saturates before an
aiohttp server does, so HTTP benchmarks load the server with wrk and read its summary."""

from __future__ import annotations

import os
import re
import resource
import shutil
import subprocess
import time
from pathlib import Path

# GET /rules/ids for every router of a tab-separated file in turn (mac, ETag or empty, key
# or empty): with an ETag, If-None-Match (answered 304); with a key, Authorization.
POLL_SCRIPT = """
local requests, n, i = {}, 0, 0
init = function(args)
  for line in io.lines(args[1]) do
    local address, etag, key = line:match("([^\\t]*)\\t([^\\t]*)\\t([^\\t]*)")
    local headers = {["X-ID"] = address, ["Accept-Encoding"] = "gzip"}
    if etag ~= "" then headers["If-None-Match"] = etag end
    if key ~= "" then headers["Authorization"] = "Bearer " .. key end
    n = n + 1
    requests[n] = wrk.format("GET", "/rules/ids", headers)
  end
end
request = function()
  i = i % n + 1
  return requests[i]
end
"""


def available() -> bool:
    return shutil.which("wrk") is not None


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time the processes have used (from /proc)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def run_wrk(url: str, script: Path | None, seconds: int, connections: int,
            *args: str, server_pids: list[int] = (), headers: dict[str, str] | None = None
            ) -> dict:
    """One wrk run (1 thread): requests/s, request count, answers other than 2xx/3xx, the
    99th percentile latency in ms, and the cores wrk and the server processes kept busy (1.0:
    one core saturated), to tell which side saturated."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    for name, value in (headers or {}).items():
        command += ["-H", f"{name}: {value}"]
    if script is not None:
        command += ["-s", str(script)]
    command.append(url)
    if args:
        command += ["--", *args]
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before, started = cpu_seconds(list(server_pids)), time.monotonic()
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    wall = time.monotonic() - started
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    wrk_cpu = (children_after.ru_utime + children_after.ru_stime
               - children_before.ru_utime - children_before.ru_stime)
    server_cpu = cpu_seconds(list(server_pids)) - server_before
    other = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", output)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return {"rate": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
            "requests": int(re.search(r"(\d+) requests in", output).group(1)),
            "non_2xx_3xx": int(other.group(1)) if other else 0,
            "p99_ms": float(p99.group(1)) * scale[p99.group(2)] if p99 else float("nan"),
            "wrk_cores": wrk_cpu / wall, "server_cores": server_cpu / wall}


def router_file(path: Path, routers: dict[str, str], keys: dict[str, str] | None = None,
                with_etags: bool = True) -> Path:
    """The routers POLL_SCRIPT cycles through: mac, ETag (empty: a 200 poll), key."""
    path.write_text("".join(
        f"{mac}\t{etag if with_etags else ''}\t{(keys or {}).get(mac, '')}\n"
        for mac, etag in routers.items()))
    return path
