"""How a server process runs: `supervisor.py` (`serve` with several HTTP workers and one
background process, restarting a child that dies), `shutdown.py` (serve until SIGTERM,
then drain the requests in progress before stopping) and `instance.py` (one service per
DATA_DIR)."""
