"""The channels of the one change feed (server/changes.py): each NOTIFY a statement sends in
its transaction, by name, so that the sender and every subscriber name the same channel."""

from __future__ import annotations

ROUTER_RULES = "router_rules"  # a router's payload changed; payload: its MAC
ROUTER_KEYS = "router_keys"    # a router's key rotated or revoked, or it removed; payload: its MAC
FLEET_LIST = "fleet_list"      # the fleet's lists, or an allowlist, changed
INTEL_LIST = "intel_list"      # what routers are sent of threat intelligence may have changed


def notify(channel: str, payload: str = "''") -> str:
    """The statement that notifies `channel` (`payload`: SQL, a parameter or a literal)."""
    return f"SELECT pg_notify('{channel}', {payload})"


FLEET_CHANGED = notify(FLEET_LIST)  # sent by the fleet job and by allowlist changes
