"""Driving the server with wrk (Debian package `wrk`): a Python client saturates before an
aiohttp server does, so HTTP benchmarks load the server with wrk and read its summary."""

from __future__ import annotations

import re
import shutil
import subprocess
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


def run_wrk(url: str, script: Path | None, seconds: int, connections: int,
            *args: str) -> dict:
    """One wrk run (1 thread): requests/s, request count, answers other than 2xx/3xx, and the
    99th percentile latency in ms."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if script is not None:
        command += ["-s", str(script)]
    command.append(url)
    if args:
        command += ["--", *args]
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    other = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", output)
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return {"rate": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),
            "requests": int(re.search(r"(\d+) requests in", output).group(1)),
            "non_2xx_3xx": int(other.group(1)) if other else 0,
            "p99_ms": float(p99.group(1)) * scale[p99.group(2)] if p99 else float("nan")}


def router_file(path: Path, routers: dict[str, str], keys: dict[str, str] | None = None,
                with_etags: bool = True) -> Path:
    """The routers POLL_SCRIPT cycles through: mac, ETag (empty: a 200 poll), key."""
    path.write_text("".join(
        f"{mac}\t{etag if with_etags else ''}\t{(keys or {}).get(mac, '')}\n"
        for mac, etag in routers.items()))
    return path
