"""What routers report they loaded (table `router_applied`, POST /rules/applied)."""

from __future__ import annotations

from server.db.pool import Database

# Store the report and say whether the reported ETags are the current payloads', in one
# round trip.
REPORT = """
WITH stored AS (
    INSERT INTO router_applied (mac, ids_etag, firewall_etag, ok, detail)
    VALUES (%(mac)s, %(ids)s, %(firewall)s, %(ok)s, %(detail)s)
    ON CONFLICT (mac) DO UPDATE SET ids_etag = EXCLUDED.ids_etag,
        firewall_etag = EXCLUDED.firewall_etag, ok = EXCLUDED.ok, detail = EXCLUDED.detail,
        reported_at = EXCLUDED.reported_at)
SELECT coalesce(ids_etag = %(ids)s, false), coalesce(firewall_etag = %(firewall)s, false)
FROM (SELECT 1) one LEFT JOIN router_rules ON mac = %(mac)s"""


async def report(db: Database, mac: str, ids_etag: str | None, firewall_etag: str | None,
                 ok: bool, detail: str | None) -> tuple[bool, bool]:
    """(ids current, firewall current) for the reported ETags."""
    row = await db.fetchone(REPORT, {"mac": mac, "ids": ids_etag, "firewall": firewall_etag,
                                      "ok": ok, "detail": detail})
    return row[0], row[1]
