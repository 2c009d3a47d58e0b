"""HTTP handlers, thin: parse the request, call the capability, answer JSON. Router API
(`router_api.py`), notification API (`notifications.py`, a sub-app at /api/), operations
(`operations.py`: /metrics, /openapi.json), and `not_modified.py`: the 304 answer to a rules
poll decided from its head alone, before any handler (server/connection.py calls it)."""
