"""Rule generation and the worker processes CPU-bound work runs in.

- `addresses.py`: addresses in one canonical form, which are public (an explicit table of
  IANA's special-purpose ranges) and which reporter network each counts for;
- `generate.py`: the pure pipeline for one router (sampling, flowbits), `firewall.py`: which
  addresses it blocks and why, `payloads.py`: canonical JSON, ETag, stored gzip; `fleet.py`: the fleet's
  attackers and outbreaks from many routers' reports, and the shared list routers get;
  `intel.py`: the threat intelligence document (Suricata datasets, rules, block entries);
  `places.py`: a delta's removals as places among what the router holds (`?delta=2`);
- `ruleset.py`: the published ruleset loaded once per worker process; `worker.py`: one
  router's generation as a worker runs it; `overrides.py` and `selectors.py`: operators'
  rule overrides and the suricata-update-style selectors they use;
- `pool.py`: a pool of worker processes running one function with a time limit;
  `processes.py`: process pools whose workers die with their parent.

Layer: imports ruledata only; no web serving, no database (import-linter checks both).
"""
