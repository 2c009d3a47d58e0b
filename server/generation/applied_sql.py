"""What routers report they loaded (table `router_applied`, POST /rules/applied)."""

from __future__ import annotations

from server.db.pool import Database

# Store the report and say whether the reported ETags are the current payloads': two
# statements sent together (one round trip), each planned by Citus onto the router's shard
# (a data-modifying CTE would be pulled through the coordinator: issue 45).
STORE_REPORT = """INSERT INTO router_applied (mac, ids_etag, firewall_etag, ok, detail)
VALUES (%(mac)s, %(ids)s, %(firewall)s, %(ok)s, %(detail)s)
ON CONFLICT (mac) DO UPDATE SET ids_etag = EXCLUDED.ids_etag,
    firewall_etag = EXCLUDED.firewall_etag, ok = EXCLUDED.ok, detail = EXCLUDED.detail,
    reported_at = EXCLUDED.reported_at"""
CURRENT = """SELECT coalesce(bool_or(ids_etag = %(ids)s), false),
       coalesce(bool_or(firewall_etag = %(firewall)s), false)
FROM router_rules WHERE mac = %(mac)s"""
REPORT = f"{STORE_REPORT};\n{CURRENT}"


async def report(db: Database, mac: str, ids_etag: str | None, firewall_etag: str | None,
                 ok: bool, detail: str | None) -> tuple[bool, bool]:
    """(ids current, firewall current) for the reported ETags."""
    row = await db.fetchone(REPORT, {"mac": mac, "ids": ids_etag, "firewall": firewall_etag,
                                      "ok": ok, "detail": detail})
    return row[0], row[1]

# Whether each router of %(macs)s last reported loading its current payloads: (mac, the
# report's ok or NULL when it never reported since its owner's ownership began, when,
# whether its ETags are the stored ones).
RULES_STATE = """SELECT r.mac::text, a.ok, a.reported_at,
       a.ids_etag IS NOT DISTINCT FROM r.ids_etag
       AND a.firewall_etag IS NOT DISTINCT FROM r.firewall_etag
FROM router_rules r JOIN routers o USING (mac)
     LEFT JOIN router_applied a ON a.mac = r.mac
                               AND a.reported_at >= coalesce(o.owner_since, o.registered_at)
WHERE r.mac = ANY(%(macs)s::macaddr[])"""
