"""Threat intelligence (docs/intel.md): feeds in, findings out to the routers' owners.

- `formats.py`: a feed's bytes read in its format (plain, ThreatFox, URLhaus, Spamhaus DROP,
  MISP) into indicators in the hunt's stored forms, each refused line counted by reason.
- `fetching.py`: a feed's bytes from its URL as a hostile server could serve them (conditional
  GET, caps on time and decoded bytes, redirects kept off private addresses).
- `feeds.py`: a feed's new version taken whole, from its URL or a file, or the previous kept.
- `retro.py`: indicators matched against the hunt index (the retro-hunt over
  HUNT_RETENTION_DAYS, and each minute the last two days), sightings recorded, values seen
  by too much of the fleet held.
- `owners.py`: each new sighting told to its router's owner through the notification
  service's records (one email an hour at most).
- `config.py`: the settings the capability uses, taken once from `Settings`.
- `jobs.py`: the intel-fetch and intel-match jobs.
- `listing.py`: sightings as people read them (the command, the console).
- `values.py`: a value as people write it (`KIND:VALUE`, or bare) read into its stored form.

What routers are sent is served by server/intel/document.py (GET /rules/intel), one
document for each capacity routers name (`capacity.py`: the Router-Capacity header), built
by engine/intel.py; the SQL is server/intel/sql.py.
"""
