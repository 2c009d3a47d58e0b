"""yoyo SQL migrations, applied automatically at start-up (see server/db/migrate.py)."""

from pathlib import Path

MIGRATIONS_DIR = Path(__file__).resolve().parent
