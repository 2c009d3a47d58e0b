"""What owners say of what their routers saw (issue 83): "that is not an attack".

- `marks.py`: a mark made or undone for one router (its allowlist, an override, a sighting
  closed), and counted for the fleet by the networks marking a value;
- `sql.py`: the marks (table `false_positives`), and their networks counted;
- `config.py`: the settings the marks use;
- `jobs.py`: the job judging every marked value again.

The HTTP face is server/handlers/owners.py; the operator's, ops/feedback.py."""
