"""The HTTP application and what every request passes through: `app.py` (the app factory:
routes, middlewares, one cleanup context per resource), `peers.py` (the client's address
through trusted proxies, bearer tokens), `limits.py` (flood limits per router and per client
address), `in_flight.py` (requests in progress, for the drain), `access_log.py` (one line
per request, written in batches) and `openapi.py` (the API document at /openapi.json).
The handlers themselves are in server/handlers/; the 304 answered before the app, in
server/polling/."""
