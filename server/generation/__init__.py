"""Per-router rule generation, from the queue in the database to the stored payloads.

One generation's path through the code:

1. `service.GenerationService` (event loop) claims due routers as leases
   (`queue.claim_due`, FOR UPDATE SKIP LOCKED) into its buffer and hands each mac to
   `service.generate_router`, which builds a `task.RouterTask` and runs it in the
   `engine.pool.WorkerPool`.
2. In the worker process, `task.generate_and_store` renews the lease and reads the telemetry
   summary in one statement, calls the engine (`engine.worker.generate_for_router`: ruleset,
   sampling, firewall entries, serialisation, the router's .rules file), and stores both
   payloads with the router's next due time in one statement, only while the lease is its own.
3. Back in the event loop, a failure reschedules the router with backoff (`queue.fail`).

`rulegen` goes through `service.generate_once` (the same path, with a one-off worker).

Its SQL: `sql.py` (the queue's leases and a generation worker's statements), `rules_sql.py`
(the stored payloads and activations), `applied_sql.py` (what routers report they loaded);
`status.py` is its part of the fleet at a glance; `declarations.py` what each router
declared it holds, as this process last wrote it (a poll writes it only when it may have
changed).

Imports: server.db, server.fleet (the outbreaks read with a router's tuning), server.routers,
server.telemetry, engine, ruledata; nothing from ops.
"""
