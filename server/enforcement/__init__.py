"""What the routers' firewalls enforced (issue 82): each agent's report of what its block
lists dropped, stored per router and day and counted for the fleet.

- `report.py`: a report as the API takes it (POST /rules/enforced);
- `store.py`: a report added to its router's day, bounded and only for what it was sent;
- `sql.py`: the reports' tables (`enforcement_days`, `enforcement_hits`) and the figures'
  statements;
- `figures.py`: per list, feed and entry over 1, 7 and 30 days, and one router's;
- `config.py`: the settings the reports use;
- `jobs.py`: the job setting the figures' metrics.

The HTTP face is server/handlers/router_api.py; the operator's, ops/intel.py
(`intel effectiveness`) and the console."""
