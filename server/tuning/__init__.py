"""Operators' tuning of what routers get: rule overrides, the firewall allowlist, a router's
enrollment reset. The commands (`router-backend rules|allowlist|subscriptions reset`) and the
console's forms both call this package, so a change is checked, stored and recorded
(`tuning_changes`: who, when, what) the same way whoever makes it. `changes.py` holds each
change and its checks; the SQL is `allowlist_sql.py` (the allowlist, read too by the fleet
and the shared documents) and `override_sql.py` (the rule overrides).
"""
