"""HTTP handlers, thin: read the request into plain values, call the capability, answer
JSON. Router API (`router_api.py`, a rules poll answered 304 from the ETag cache),
notification API (`notifications.py`, a sub-app at /api/, with the owners' API of
`owners.py` for the subscriber-facing frontend; `reading.py`: a JSON body, a page), operations (`operations.py`:
/metrics, /openapi.json, whose document is `openapi.py`); `domain_errors.py`: the
capabilities' own errors and the statuses they are answered with."""
