"""The fleet: addresses and signatures many routers report, counted over every router's alerts
and sent back to every router (docs/rules.md, "The fleet").

- `job.py`: the fleet job: the attackers and outbreaks counted (the counting rule is
  engine/fleet.py's and its SQL here), the lists replaced at once;
- `config.py`: the settings the capability uses, taken once from `Settings`;
- `explain.py`: why each reported address is listed or kept out, for operators, from the
  job's own statements;
- `lists.py`: the lists as operators read them (attackers, outbreaks, the entries one router
  gets), their times written;
- `document.py`: the fleet's list every router polls (GET /rules/fleet);
- `sql.py`: every statement of the fleet's tables (`fleet_*`), and the outbreaks as the
  generation reads them.
"""
