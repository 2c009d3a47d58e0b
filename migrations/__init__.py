"""yoyo SQL migrations, applied automatically at start-up (see server/db/migrate.py).

This folder is a Python package only so that installing the project ships the SQL files;
`read_schema_migrations` leaves this module out of the migration list.
"""

from pathlib import Path

from yoyo import read_migrations

MIGRATIONS_DIR = Path(__file__).resolve().parent


def read_schema_migrations():
    return read_migrations(str(MIGRATIONS_DIR)).filter(lambda m: m.id != "__init__")
