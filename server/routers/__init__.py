"""Who a router is and what it may do: `mac.py` (the one form of a router identity),
`identity.py` (the `X-ID` header, registration on first contact, closed-mode admission),
`keys.py` (per-router keys: making them, checking the one a request presents, enrollment),
`registration.py` (the registration protocol: a new router, on first contact or enrolling,
within its client address's limit)
and `applied.py` (`POST /rules/applied`: what a router reports it loaded);
`errors.py` (why a router's request is refused, in the routers' words). Their SQL:
`sql.py` (registrations and their per-address limit) and `key_sql.py` (key hashes,
enrollment windows); a router's removal from every capability is server/removal.py; the
operators' commands in ops/subscriptions.py.
"""
