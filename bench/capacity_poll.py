"""Routers of three capacities polling the fleet's list and the threat intelligence, across
a restart of the service (issue 82).

ROUTERS routers say one of three capacities in Router-Capacity (CAPACITIES: a small router,
a medium one whose sets are ipsets of the default size, a large one with JA4) and fetch both
documents whole. Every answer is checked against what its router declared: the
intelligence's entries within its
dataset bound, its block entries and the fleet's list within one set, no JA4 file without
`ja4=1`. Then both documents change (1 % of the feed's values replaced, 1 % of the fleet's
list), the service is stopped and started again (every process), and every router asks
what changed since the versions it holds (`?delta=2`, If-None-Match), as the reference
agent does; a sample of each capacity's deltas is applied (agent/deltas.py, agent/intel.py)
and compared with the whole document.

The reference, in the same run: what the routers would have downloaded had each got its
whole new documents, as every router did after a restart before the versions lived in the
database. The documents built for the change are counted in the versions' table: one per
size in use, whatever the number of routers.

    python -m bench.capacity_poll [--routers 10000] [--workers 2] [--values 100000]
        [--fleet 10000] [--delta-form 2]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import ipaddress
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import orjson

from agent.deltas import fleet_applied
from agent.intel import applied
from server.db.channels import FLEET_CHANGED
from testkit.database import Sql, command_env, settings_for, throwaway_database
from testkit.server import ServerRunner, router_backend_output

# (name, header, dataset entries it holds, set entries it holds, JA4)
CAPACITIES = (("small", "datasets=1000, sets=1000, ja4=0", 1_000, 1_000, False),
              ("medium", "datasets=10000, ja4=0, sets=65536", 10_000, 65_536, False),
              ("large", "datasets=100000, memory=20000000, ja4=1, sets=65536", 100_000,
               65_536, True))
SAMPLE = 3  # deltas of each capacity applied and compared with the whole document
DOCUMENTS = ("fleet", "intel")


def _macs(count: int) -> list[str]:
    return [f"02:83:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}:01"
            for n in range(count)]


def _capacity(n: int) -> tuple:
    return CAPACITIES[n % len(CAPACITIES)]


def _feed(values: int, changed: int) -> bytes:
    """Domains and, one in twenty, public addresses (block entries); the last `changed`
    of each new."""
    addresses = values // 20
    domains = values - addresses
    lines = [f"bad{n}.capacity-poll.example" for n in range(domains - changed)]
    lines += [f"new{n}.capacity-poll.example" for n in range(changed)]
    first = int(ipaddress.IPv4Address("62.4.0.1"))
    moved = changed // 20
    lines += [str(ipaddress.IPv4Address(first + n)) for n in range(moved, addresses + moved)]
    return "\n".join(lines).encode()


def _fleet_rows(count: int, shift: int, now: datetime) -> list[tuple]:
    """The nth entry seen n minutes before `now` (one time for the run: an entry kept by
    the change keeps its expiry, as the fleet job's rounding keeps it)."""
    first = int(ipaddress.IPv4Address("45.60.0.1"))
    return [(str(ipaddress.IPv4Address(first + n)), 3 + n % 40, now - timedelta(minutes=n),
             now + timedelta(days=1)) for n in range(shift, count + shift)]


def _store_fleet(sql: Sql, count: int, shift: int, now: datetime) -> None:
    rows = _fleet_rows(count, shift, now)
    sql.rows("DELETE FROM fleet_attackers")
    sql.rows("""INSERT INTO fleet_attackers (address, routers, networks, alerts, severity,
                signatures, first_seen, last_seen, expires_at, reporters)
                SELECT a::inet, n, n, 10, 1, '{}', s, s, e, '[]'
                FROM unnest(%s::text[], %s::int[], %s::timestamptz[], %s::timestamptz[])
                    AS x(a, n, s, e)""",
             tuple(list(column) for column in zip(*rows)))
    sql.rows(FLEET_CHANGED)


def _get(url: str, path: str, mac: str, header: str, etag: str | None = None
         ) -> tuple[int, str, bytes]:
    headers = {"X-ID": mac, "Accept-Encoding": "gzip", "Router-Capacity": header,
               **({"If-None-Match": etag} if etag else {})}
    request = urllib.request.Request(f"{url}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.headers["ETag"], answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("ETag", ""), b""


def _poll_all(url: str, macs: list[str], held: dict | None, delta: str | None) -> dict:
    """Every router's answer for both documents: (document, mac) -> (status, etag, body)."""
    def one(job: tuple[str, int, str]) -> tuple:
        document, n, mac = job
        etag = held[(document, mac)][1] if held else None
        path = f"/rules/{document}{'?delta=' + delta if delta else ''}"
        return (document, mac), _get(url, path, mac, _capacity(n)[1], etag)
    jobs = [(document, n, mac) for n, mac in enumerate(macs) for document in DOCUMENTS]
    with ThreadPoolExecutor(16) as pool:
        return dict(pool.map(one, jobs))


def _opened(body: bytes) -> dict:
    return orjson.loads(gzip.decompress(body))


def _fits(document: str, opened: dict, capacity: tuple) -> bool:
    _, _, datasets, sets, ja4 = capacity
    if document == "fleet":
        return opened["entry_count"] <= sets and len(opened["entries"]) <= sets
    return (opened["entry_count"] <= datasets and len(opened["block"]) <= sets
            and (ja4 or "rb-intel-ja4.lst" not in opened["files"]))


def _check_whole(answers: dict, macs: list[str]) -> dict:
    """Each router's two documents checked against its capacity (each distinct body opened
    once, every router's answer matched to one by its digest); the ETags in use."""
    opened: dict[str, dict] = {}
    etags: dict[str, set[str]] = {document: set() for document in DOCUMENTS}
    for n, mac in enumerate(macs):
        for document in DOCUMENTS:
            status, etag, body = answers[(document, mac)]
            assert status == 200, (document, mac, status)
            digest = hashlib.sha256(body).hexdigest()
            if digest not in opened:
                opened[digest] = _opened(body)
            assert _fits(document, opened[digest], _capacity(n)), \
                f"{document} of {opened[digest]['entry_count']} entries past {_capacity(n)[1]}"
            etags[document].add(etag)
    return {document: len(found) for document, found in etags.items()}


def _wait_built(url: str, macs: list[str], values: int, fleet: int,
                timeout: float = 180) -> None:
    """Until the large router's intelligence holds every value and the medium router's
    fleet's list every entry (the import judged, the lists' notifications heard)."""
    deadline = time.monotonic() + timeout
    for n, document, wanted in ((2, "intel", values), (1, "fleet", fleet)):
        while True:
            status, _, body = _get(url, f"/rules/{document}", macs[n], _capacity(n)[1])
            held = _opened(body)["entry_count"] if status == 200 else None
            if held == wanted:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {document} document never held {wanted:,} entries "
                                   f"(it holds {held})")
            time.sleep(0.2)


def _wait_changed(url: str, macs: list[str], held: dict, timeout: float = 180) -> None:
    """Until the large router's intelligence and the medium router's fleet's list moved
    from the ETags held (the change heard; a smaller document may not move: the values
    that changed need not be among those it keeps)."""
    deadline = time.monotonic() + timeout
    for n, document in ((2, "intel"), (1, "fleet")):
        while _get(url, f"/rules/{document}", macs[n], _capacity(n)[1],
                   held[(document, macs[n])][1])[0] == 304:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {document} document never changed")
            time.sleep(0.2)


def _check_deltas(answers: dict, held: dict, wholes: dict, macs: list[str]
                  ) -> tuple[int, int]:
    """Deltas answered from each router's version, and 304s (a smaller document the change
    left as it was); a sample of each capacity's answers applied to what the router held
    and equal to the whole document now."""
    deltas = unchanged = 0
    applied_of = {"fleet": fleet_applied, "intel": applied}
    for n, mac in enumerate(macs):
        for document in DOCUMENTS:
            status, _, body = answers[(document, mac)]
            was = held[(document, mac)][1].removeprefix("W/").strip('"')
            answer = _opened(body) if status == 200 else {}
            if answer.get("delta_from") == was:
                deltas += 1
            elif status == 304:
                unchanged += 1
            if n >= SAMPLE * len(CAPACITIES):
                continue
            start = _opened(held[(document, mac)][2])
            made = start if status == 304 else applied_of[document](start, answer)
            whole = wholes[(document, n % len(CAPACITIES))]
            key = "entries" if document == "fleet" else "block"
            for side in (made, whole):
                side[key] = sorted(side[key], key=lambda entry: entry["address"])
            assert made == whole, f"a {document} delta applied is not the document"
    return deltas, unchanged


def run(routers: int, workers: int, values: int, fleet: int, form: str = "2") -> dict:
    with throwaway_database() as (location, workdir):
        macs = _macs(routers)
        now = datetime.now(timezone.utc).replace(microsecond=0)
        sql = Sql(location)
        sql.rows("INSERT INTO routers (mac) SELECT unnest(%s::macaddr[])", (macs,))
        env = command_env(settings_for(location, workdir))
        server = ServerRunner(location, workdir, HTTP_WORKERS=str(workers)).start(120)
        try:
            feed = workdir / "feed.txt"
            feed.write_bytes(_feed(values, 0))
            router_backend_output(env, "intel", "import", str(feed), "--feed", "bench",
                                  "--format", "plain")
            _store_fleet(sql, fleet, 0, now)
            _wait_built(server.url, macs, values, fleet)
            held = _poll_all(server.url, macs, None, None)
            etags = _check_whole(held, macs)
            versions_before = sql.value("SELECT count(*) FROM document_versions")
            feed.write_bytes(_feed(values, values // 100))
            router_backend_output(env, "intel", "import", str(feed), "--feed", "bench",
                                  "--format", "plain")
            _store_fleet(sql, fleet, fleet // 100, now)
            _wait_changed(server.url, macs, held)
            built = sql.value("SELECT count(*) FROM document_versions") - versions_before
            server.stop()
            began = time.monotonic()
            server.start(120)
            restart = time.monotonic() - began
            wholes = {}
            whole_bytes = {}
            for n in range(len(CAPACITIES)):
                for document in DOCUMENTS:
                    _, _, body = _get(server.url, f"/rules/{document}", macs[n],
                                      _capacity(n)[1])
                    wholes[(document, n)] = _opened(body)
                    whole_bytes[(document, n)] = len(body)
            answers = _poll_all(server.url, macs, held, form)
        finally:
            server.stop()
    deltas, unchanged = _check_deltas(answers, held, wholes, macs)
    served = {document: sum(len(answers[(document, mac)][2]) for mac in macs)
              for document in DOCUMENTS}
    reference = {document: sum(whole_bytes[(document, n % len(CAPACITIES))]
                               for n in range(routers)) for document in DOCUMENTS}
    return {"routers": routers, "workers": workers, "values": values, "fleet": fleet,
            "etags": etags, "built": built, "restart": restart, "deltas": deltas,
            "unchanged": unchanged,
            "served": served, "reference": reference}


def report(r: dict) -> None:
    print(f"{r['routers']:,} routers of {len(CAPACITIES)} capacities "
          f"({', '.join(name for name, *_ in CAPACITIES)}); a feed of {r['values']:,} values, "
          f"a fleet's list of {r['fleet']:,}; every router's two documents fit what it "
          f"declared (each answer checked)")
    print(f"documents served: fleet {r['etags']['fleet']}, intel {r['etags']['intel']} "
          f"(one per size in use); versions built for the change: {r['built']} "
          f"(not the number of routers)")
    print(f"the change: 1 % of each replaced; the service ({r['workers']} HTTP workers) "
          f"restarted in {r['restart']:.1f} s; deltas answered: {r['deltas']:,} and 304 "
          f"(a smaller document the change left as it was) {r['unchanged']:,} of "
          f"{2 * r['routers']:,} ({SAMPLE} of each capacity applied and equal to the whole)")
    for document in DOCUMENTS:
        served, reference = r["served"][document], r["reference"][document]
        print(f"{document}: {served / 1e6:.2f} MB served to bring every router current, "
              f"whole documents {reference / 1e6:.1f} MB: {served / reference:.2%}")
    served, reference = sum(r["served"].values()), sum(r["reference"].values())
    print(f"both: **{served / reference:.2%}** of whole documents")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--values", type=int, default=100_000)
    parser.add_argument("--fleet", type=int, default=10_000)
    parser.add_argument("--delta-form", choices=("1", "2"), default="2",
                        help="`?delta=`: 2 removals as places, as the agent asks; 1 named")
    args = parser.parse_args()
    report(run(args.routers, args.workers, args.values, args.fleet, args.delta_form))
    return 0


if __name__ == "__main__":
    sys.exit(main())
