"""Real ET alerts as many routers would report one attacker, for the fleet's tests and drill:
the ET SCAN alerts of the corpus's sensor capture (severity 2, blocking at the default
RULE_GENERATION_BLOCK_SEVERITY), the scanner's address replaced by the attacker's and the
scanned one by the router's LAN address."""

from __future__ import annotations

import functools

import orjson

from testkit.corpus import corpus_path

SENSOR_EVE = ("eve", "lab-sensor-eve.json")


@functools.lru_cache(maxsize=1)
def scan_alerts() -> tuple[dict, ...]:
    """The corpus's ET SCAN alerts of blocking severity, as recorded."""
    found = []
    with corpus_path(*SENSOR_EVE).open("rb") as eve:
        for line in eve:
            record = orjson.loads(line)
            alert = record.get("alert") if record.get("event_type") == "alert" else None
            if alert and alert["severity"] <= 2 and alert["signature"].startswith("ET SCAN"):
                found.append(record)
    return tuple(found)


def attack_body(attacker: str, lan_address: str = "192.168.1.2") -> bytes:
    """NDJSON of the corpus's scan alerts as seen by a router under attack by `attacker`."""
    return b"\n".join(orjson.dumps({**record, "src_ip": attacker, "dest_ip": lan_address})
                      for record in scan_alerts())


def sids() -> set[int]:
    return {record["alert"]["signature_id"] for record in scan_alerts()}
