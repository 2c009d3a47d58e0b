"""A router's poll, this checkout against another's (the release before a change), both
servers up at once on one PostgreSQL, rounds alternating: the latency of
`GET /rules/last_updated` (the poll every agent makes each minute, which records an
activation and, here, what the router declares it holds) and of the threat intelligence's
304 (`GET /rules/intel` naming the document it holds), each poll with the Router-Capacity
header of one of three capacities.

    python -m bench.poll_pair --before /path/to/checkout [--before-python P]
        [--routers 3000] [--seconds 8] [--rounds 6] [--connections 16]

Every router polls once before the rounds (registered, its declaration stored); each round
then loads one side with wrk (1 thread, a Lua script cycling through the routers), then the
other, which goes first alternating. Prints each round's p99 and requests/s per side, and the
medians and the median of the rounds' p99 ratios. A release that did not know the header
ignores it (it is the same request); the ratio is what this release's poll costs against
that one's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import urllib.request
from pathlib import Path

from bench.ingest_pair import paired_servers
from bench.wrk import available, run_wrk

FIRST_MAC = 0x0200_0082_0000
CAPACITIES = ("datasets=1000, sets=1000, rules=5000",
              "datasets=10000, sets=65536, rules=20000",
              "datasets=100000, memory=20000000, ja4=1, sets=65536")

# GET `path` for every router of a tab-separated file (mac, capacity, ETag or empty).
SCRIPT = """
local requests, n, i = {}, 0, 0
init = function(args)
  for line in io.lines(args[1]) do
    local mac, capacity, etag = line:match("([^\\t]*)\\t([^\\t]*)\\t([^\\t]*)")
    local headers = {["X-ID"] = mac, ["Router-Capacity"] = capacity,
                     ["Accept-Encoding"] = "gzip"}
    if etag ~= "" then headers["If-None-Match"] = etag end
    n = n + 1
    requests[n] = wrk.format("GET", args[2], headers)
  end
end
request = function()
  i = i % n + 1
  return requests[i]
end
"""


def routers(count: int) -> list[tuple[str, str]]:
    macs = [":".join(f"{(FIRST_MAC + n) >> shift & 0xff:02x}" for shift in range(40, -8, -8))
            for n in range(count)]
    return [(mac, CAPACITIES[n % len(CAPACITIES)]) for n, mac in enumerate(macs)]


def first_polls(url: str, fleet: list[tuple[str, str]]) -> dict[str, str]:
    """Each router's first poll (registered, its declaration stored); the intel ETag each
    capacity's document has."""
    etags: dict[str, str] = {}
    for mac, capacity in fleet:
        headers = {"X-ID": mac, "Router-Capacity": capacity}
        with urllib.request.urlopen(urllib.request.Request(
                f"{url}/rules/last_updated", headers=headers), timeout=30) as answer:
            answer.read()
        if capacity not in etags:
            with urllib.request.urlopen(urllib.request.Request(
                    f"{url}/rules/intel", headers=headers), timeout=30) as answer:
                etags[capacity] = answer.headers["ETag"]
    return etags


def poll_file(path: Path, fleet: list[tuple[str, str]], etags: dict[str, str] | None) -> Path:
    path.write_text("".join(f"{mac}\t{capacity}\t{(etags or {}).get(capacity, '')}\n"
                            for mac, capacity in fleet))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout")
    parser.add_argument("--before-python", help="its Python (default: its .venv's)")
    parser.add_argument("--routers", type=int, default=3_000)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if not available():
        print("wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 1
    before_python = args.before_python or str(args.before / ".venv" / "bin" / "python")
    fleet = routers(args.routers)
    paths = ("/rules/last_updated", "/rules/intel")
    results: dict[tuple[str, str], list[dict]] = {}
    with paired_servers(args.before, before_python, {}, {}) as (scratch, servers):
        sides = {side: runner for side, (_, runner) in servers.items()}
        files = {}
        for side, runner in sides.items():
            etags = first_polls(runner.url, fleet)
            files[side, paths[0]] = poll_file(scratch / f"{side}-poll", fleet, None)
            files[side, paths[1]] = poll_file(scratch / f"{side}-intel", fleet, etags)
        script = scratch / "poll.lua"
        script.write_text(SCRIPT)
        print(f"{args.routers} routers of {len(CAPACITIES)} capacities, {args.rounds} rounds "
              f"of {args.seconds} s a side and path, {args.connections} connections; this "
              f"checkout against {args.before}")
        for number in range(args.rounds):
            order = ("before", "this") if number % 2 == 0 else ("this", "before")
            for path in paths:
                for side in order:
                    runner = sides[side]
                    result = run_wrk(runner.url, script, args.seconds, args.connections,
                                     str(files[side, path]), path,
                                     server_pids=[runner.process.pid])
                    if result["non_2xx_3xx"]:
                        raise RuntimeError(f"{side} {path}: {result['non_2xx_3xx']} answers "
                                           f"not 2xx or 3xx")
                    results.setdefault((side, path), []).append(result)
                before, this = results["before", path][-1], results["this", path][-1]
                print(f"round {number + 1} {path}: p99 before {before['p99_ms']:.2f} ms, "
                      f"this {this['p99_ms']:.2f} ms ({this['p99_ms'] / before['p99_ms']:.3f}); "
                      f"{before['rate']:,.0f} / {this['rate']:,.0f} req/s; server "
                      f"{before['server_cores']:.2f} / {this['server_cores']:.2f} cores, wrk "
                      f"{this['wrk_cores']:.2f}", flush=True)
    for path in paths:
        before, this = results["before", path], results["this", path]
        p99 = [statistics.median(r["p99_ms"] for r in side) for side in (before, this)]
        rate = [statistics.median(r["rate"] for r in side) for side in (before, this)]
        paired = statistics.median(t["p99_ms"] / b["p99_ms"] for t, b in zip(this, before))
        print(f"{path}: p99 median before {p99[0]:.2f} ms, this {p99[1]:.2f} ms: "
              f"{p99[1] / p99[0]:.3f} on the medians, {paired:.3f} the median of the rounds' "
              f"ratios; req/s {rate[0]:,.0f} / {rate[1]:,.0f} ({rate[1] / rate[0]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
