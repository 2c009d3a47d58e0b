"""Database access: the aiopg pool and its error mapping (`pool.py`), where the database is
(`location.py`), bringing it up (`lifecycle.py`, `embedded.py`, `migrate.py`), the Core
schema (`schema.py`), and the SQL of the tables several capabilities share: routers,
rule payloads and activations, telemetry inserts, notifications, access reports. A
capability's own tables are queried from its package (generation/queue.py, jobs/ledger.py).
"""
