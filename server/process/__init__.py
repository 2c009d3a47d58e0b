"""How a server process runs: `child.py` (one process of the service: all of it, or a
supervisor's child started by its own entry, `python -m server.process.child`),
`supervisor.py` (`serve` with several HTTP workers and one background process, restarting a
child that dies), `shutdown.py` (serve until SIGTERM,
then drain the requests in progress before stopping), `instance.py` (one service per
DATA_DIR), `exits.py` (a failure's one line and exit status, for every process and
command) and `memory.py` (what a process freed given back to the system every 30 s)."""
