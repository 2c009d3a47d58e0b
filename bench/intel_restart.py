"""What a restart of the service costs the fleet's threat intelligence downloads (issue 82):
ROUTERS routers hold the document of a 100,000-value feed; the feed changes 1 %; the service
is stopped and started again (every process: the supervisor and its HTTP workers); then
every router asks what changed since the document it holds (`GET /rules/intel?delta=2`,
If-None-Match, gzip), as the reference agent does.

The reference, in the same run: what the routers would have downloaded had each got the
whole new document, as they did before the versions lived in the database (a process knew
only the versions it had built since it started). Each answer is checked: a delta from the
router's version, leading to the ETag served, and for a sample of routers the delta applied
(agent/intel.py `applied`) equals the whole document.

    python -m bench.intel_restart [--routers 2000] [--workers 2] [--values 100000]
        [--delta-form 2]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import orjson

from agent.intel import applied
from testkit.database import Sql, command_env, settings_for, throwaway_database
from testkit.server import ServerRunner, router_backend_output

SAMPLE = 10  # routers whose delta is applied and compared with the whole document
CAPACITY = "datasets=100000"  # routers that hold the whole feed (docs/router-api.md)


def _macs(count: int) -> list[str]:
    return [f"02:82:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}:01"
            for n in range(count)]


def _feed(values: int, changed: int) -> bytes:
    """The feed's values, domains and public addresses alike; the last `changed` new."""
    lines = [f"bad{n}.intel-restart.example" for n in range(values - changed)]
    lines += [f"new{n}.intel-restart.example" for n in range(changed)]
    return "\n".join(lines).encode()


def _get(url: str, mac: str, etag: str | None, delta: str | None) -> tuple[int, str, bytes]:
    headers = {"X-ID": mac, "Accept-Encoding": "gzip", "Router-Capacity": CAPACITY,
               **({"If-None-Match": etag} if etag else {})}
    request = urllib.request.Request(f"{url}/rules/intel{'?delta=' + delta if delta else ''}",
                                     headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.headers["ETag"], answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("ETag", ""), b""


def _all(url: str, macs: list[str], etags: dict[str, str] | None, delta: str | None
         ) -> list:
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(lambda mac: _get(url, mac, etags and etags[mac], delta), macs))


def _import(env: dict, workdir, values: int, changed: int) -> None:
    path = workdir / "feed.txt"
    path.write_bytes(_feed(values, changed))
    router_backend_output(env, "intel", "import", str(path), "--feed", "bench", "--format",
                          "plain")


def _until_served(url: str, mac: str, entries: int, timeout: float = 120,
                  etag_not: str | None = None) -> tuple[str, dict]:
    """The document served once it holds `entries` (and is not `etag_not`: the change
    heard)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, etag, packed = _get(url, mac, None, None)
        document = orjson.loads(gzip.decompress(packed))
        if document["entry_count"] == entries and etag != etag_not:
            return etag, document
        time.sleep(0.2)
    raise RuntimeError(f"the document of {entries:,} entries was not served in {timeout} s")


def run(routers: int, workers: int, values: int, form: str = "2") -> dict:
    with throwaway_database() as (location, workdir):
        macs = _macs(routers)
        Sql(location).rows("INSERT INTO routers (mac) SELECT unnest(%s::macaddr[])", (macs,))
        env = command_env(settings_for(location, workdir))
        server = ServerRunner(location, workdir, HTTP_WORKERS=str(workers)).start(120)
        try:
            _import(env, workdir, values, 0)
            before, _ = _until_served(server.url, macs[0], values)
            held = {mac: etag for mac, (status, etag, _) in
                    zip(macs, _all(server.url, macs, None, None)) if status == 200}
            whole_before = gzip.decompress(_get(server.url, macs[0], None, None)[2])
            assert len(held) == routers and set(held.values()) == {before}, "not one document"
            _import(env, workdir, values, values // 100)
            _until_served(server.url, macs[0], values, etag_not=before)
            unrestarted = len(_get(server.url, macs[0], before, form)[2])
            server.stop()
            began = time.monotonic()
            server.start(120)
            restart = time.monotonic() - began
            after, whole = _until_served(server.url, macs[0], values)
            answers = _all(server.url, macs, held, form)
            whole_bytes = len(_get(server.url, macs[0], None, None)[2])
        finally:
            server.stop()
    served = sum(len(body) for _, _, body in answers)
    deltas = 0
    for mac, (status, etag, body) in zip(macs, answers):
        document = orjson.loads(gzip.decompress(body))
        if status == 200 and etag == after and document.get("delta_from") == \
                before.removeprefix("W/").strip('"'):
            deltas += 1
        else:
            print("not a delta:", status, etag, after, str(document)[:150], file=sys.stderr)
    start = orjson.loads(whole_before)
    for _, _, body in answers[:SAMPLE]:
        assert applied(start, orjson.loads(gzip.decompress(body))) == whole, \
            "a delta applied is not the document"
    return {"routers": routers, "workers": workers, "values": values, "deltas": deltas,
            "served": served, "whole": whole_bytes, "restart": restart,
            "unrestarted": unrestarted}


def report(r: dict) -> None:
    reference = r["whole"] * r["routers"]
    print(f"{r['routers']:,} routers holding a document of {r['values']:,} values; 1 % "
          f"changed; the service ({r['workers']} HTTP workers) restarted in "
          f"{r['restart']:.1f} s; then each router asked what changed since its version")
    print(f"deltas answered: {r['deltas']:,} of {r['routers']:,} (each from the router's "
          f"version to the ETag served; {SAMPLE} applied and equal to the whole document)")
    print(f"bytes served to bring every router current: {r['served'] / 1e6:.2f} MB; whole "
          f"documents ({r['whole'] / 1e3:.0f} KB each, the release before after a restart): "
          f"{reference / 1e6:.1f} MB: **{r['served'] / reference:.2%}**")
    print(f"the same delta asked of the processes before the restart: "
          f"{r['unrestarted']:,} bytes; after it, {r['served'] / r['routers']:,.0f} a router "
          f"on average: the restart costs "
          f"{r['served'] / r['routers'] / r['unrestarted']:.2f}× what the change costs alone")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=2_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--values", type=int, default=100_000)
    parser.add_argument("--delta-form", choices=("1", "2"), default="2",
                        help="`?delta=`: 2 removals as places, as the agent asks; 1 named")
    args = parser.parse_args()
    report(run(args.routers, args.workers, args.values, args.delta_form))
    return 0


if __name__ == "__main__":
    sys.exit(main())
