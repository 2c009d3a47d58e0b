"""How a server process runs: `supervisor.py` (`serve` with several HTTP workers and one
background process, restarting a child that dies), `shutdown.py` (serve until SIGTERM, then
drain the requests in progress before stopping) and `background.py` (the name a process
takes leases under, its long-running tasks and their health)."""
