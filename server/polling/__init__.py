"""Rules polling, the hottest path: nearly every poll is answered 304. `etag_cache.py` (each
payload's current ETag in memory, kept true by PostgreSQL notifications; `not_modified` is
the one 304 decision and `etag_header` the one ETag format, used by the handler too),
`not_modified.py` (the 304 decided from a request head alone) and `connection.py` (the one
module that uses aiohttp's private connection API: it answers such a poll as soon as its
head is parsed, before the application; HTTP_FAST_NOT_MODIFIED=false turns it off)."""
