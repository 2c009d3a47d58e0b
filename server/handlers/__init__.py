"""HTTP handlers, thin: parse the request, call the capability, answer JSON. Router API
(`router_api.py`), notification API (`notifications.py`, a sub-app at /api/), operations
(`operations.py`: /metrics, /openapi.json). A rules poll may be answered 304 before any
handler (server/polling/)."""
