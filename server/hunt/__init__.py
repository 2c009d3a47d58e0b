"""The hunt: which routers' records carried an indicator (an address, a domain or a name under
it, a TLS fingerprint, a signature, a file), across the fleet and over the index's horizon
(HUNT_RETENTION_DAYS, longer than the records').

- `search.py`: a hunt asked of the index and shaped once for the command
  (`router-backend hunt`, ops/hunt.py) and the console (server/console/hunting.py): pages of
  matches, earliest sighting first, each indicator in turn; and the record of every hunt.
- `sightings.py`: which routers saw each indicator, read from both halves of the index (the
  packed days' blocks and the postings still in rows), counted exactly.

- `tallies.py`: every router that saw each of many indicators, summed over the window in
  one pass over the blocks (the threat-intelligence retro-hunt's read).
- `indexer.py`: the postings of each upload, written from its stored chunks by the indexer
  (a loop in the process that runs the jobs, and before every hunt), not in the upload's
  transaction.

- `recent.py`: the values the index gained since a moment (the minute's intel match
  reads only those).
- `postings.py`: an upload's postings tallied, within its router's daily budget.
- `budget.py`: that budget, and who shares one: routers that do not count for the fleet yet
  share their network's.
- `packing.py`: past days packed into compressed blocks (the hunt-compact job), laid out by
  `blocks.py`.
- `config.py`: the hunt's settings, taken once (its budget, lanes, how long records are
  kept).
- `sql.py`: every statement of the hunt's tables (`hunt_*`): the queue ingestion announces
  each upload to, the postings, the packed days, the record of hunts.
- `status.py`: the index's part of the fleet at a glance.

What a record carries and how each value is stored is server/telemetry/indicators.py.
"""
