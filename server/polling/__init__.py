"""Rules polling, the hottest path: nearly every poll is answered 304. `etag_cache.py` keeps
each payload's current ETag in memory, true by PostgreSQL notifications, so that the handler
(server/handlers/router_api.py) answers such a poll without a query; `not_modified` is the
one 304 decision and `etag_header` the one ETag format. `shared_document.py` serves a
document every router gets the same, built once per change on the same notifications: the
fleet's list (GET /rules/fleet, server/fleet/document.py) and the threat intelligence
(GET /rules/intel, server/intel/document.py). `versions.py` numbers a shared document's
versions in the database, so that any process answers a delta from any version kept, and
`versioned.py` is a shared document served so (both documents are). `capacity.py` reads
what a router says it can hold (Router-Capacity), from which each shared document chooses
its size, and `sized.py` keeps one document of each size routers declare."""
