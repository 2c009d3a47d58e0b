"""What every HTTP request passes through: `routes.py` (each handler wrapped in its app's
middlewares at start-up, and the answers to paths no route has), `middleware.py` (the one
middleware of every request: requests in flight, error answers, request metrics), `peers.py` (the client's address through trusted
proxies, bearer tokens), `limits.py` (flood limits per router and per client address),
`host_buckets.py` (their buckets shared by the host's HTTP workers through a mapped file),
`in_flight.py` (requests in progress, for the drain), `connections.py` (the listening
sockets and the client connections a worker holds, bounded, the oldest idle closed first)
and `access_log.py` (one line per request, written in batches). The app factory is server/app.py; the handlers are in
server/handlers/."""
