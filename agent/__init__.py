"""router-agent: the reference agent that runs on a router beside Suricata (issue 25).

It tails Suricata's eve.json and uploads alerts to POST /log/events and flows to POST
/log/cfm, exactly once (a spool on disk and an Idempotency-Key per batch), and keeps the
router's IDS rules and firewall block list up to date from GET /rules/ids and /rules/firewall,
testing and reloading them and falling back to the previous files when that fails.

The map: `config.py` (the one INI file), `files.py` (atomic writes), `state.py` (what the agent
remembers between runs), `tail.py` (new complete lines of eve.json, across rotation and
truncation), `spool.py` (batches waiting on disk, capped), `client.py` (HTTP to the service:
retries, backoff, Retry-After), `uploads.py` (lines to batches to the server), `rules.py`
(fetch, write, test, reload, report; the fleet's list by delta), `intel.py` (the threat
intelligence document: datasets, rules and block list, by delta), `deltas.py` (whether a
delta follows the version held, and the fleet's list it leads to), `nftsets.py` (the
block-list sets read with their counters, and changed element by element),
`enforcement.py` (what they dropped, reported), `enrollment.py` (a router key from the
fleet's enrollment token), `cli.py` (the `router-agent` command).

Only the Python standard library: it runs on a router's minimal Python. It imports nothing of
the service (server, engine, ruledata, ops), enforced by .importlinter; it speaks to it over
HTTP only, as docs/router-api.md describes.
"""
