"""The owners' reports (issue 83): what each router owner is told every week of what their
routers did, through the notification service (type `weekly_report`).

- `schedule.py`: when an owner's report is due (a weekday and hour of their time zone);
- `choices.py`: an owner's choice of it (on or off, when) changed;
- `sql.py`: schedules, the reports made, and a batch of routers' week (the statements of
  telemetry, intel, generation and routers composed);
- `figures.py`: a router's week and an owner's, bounded, as the metadata holds them;
- `texts.py`: the title and the plain-text message;
- `weekly.py`: the run that makes every due report, once;
- `summary.py`: one router's day or week, as the owners' API answers it;
- `jobs.py`: the scheduled job, and the signatures' names."""
