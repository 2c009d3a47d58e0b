"""Operator commands and deployment files (the benchmarks and drills are `bench/`, beside).

One command a module, each holding its `COMMAND` (`command.py`'s `Command`: name, help, what
registers its arguments, what runs it; a group's sub-commands each name their own function):
- `cli.py` gathers them into `router-backend` (`__main__.py` and `entry.py`, the installed
  command, run it): `serve.py` (the default), `migrate.py`, `retention.py`, `dbshell.py`,
  `subscriptions.py`, `status.py`, `rules.py`, `allowlist.py`, `telemetry.py`, `console.py`
  (console sign-ins), `citus.py` (the Citus mode: distribute, add a node, rebalance, remove a
  node; server/db/citus_nodes.py does each to the cluster), `fleet.py` (the fleet's attackers
  and outbreaks), `hunt.py` (which routers saw an indicator, and the hunts made), `intel.py`
  (threat feeds, decisions on values, sightings), `reports.py` (the owners' weekly reports
  made now, or a given week's), `feedback.py` (what owners marked not an attack, for the
  fleet), `enforcement.py` (what the routers' firewalls dropped), `backup.py` and `restore.py` (with
  `pg_backup.py`, PostgreSQL's own programs run);
- `rulepreprocess.py`, `rulegen.py` (with `explain.py` for --explain),
  `routeraccessreport.py`: commands of their own entry;
- every command goes one way (`command.py`): settings -> database -> the command's function
  -> exit code, a failure reported as every process reports one (server/process/exits.py);
- `settings_doc.py`: renders the settings tables into docs/settings.md and the example env file;
- `deploy/`: systemd unit, Caddyfile, Dockerfile, compose, example environment, the
  kernel's bound on connections per client address (`connlimit.nft`).

Layer: the top; imports server, engine and ruledata.
"""
