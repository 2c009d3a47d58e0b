"""`router-backend dbshell [PSQL ARGUMENTS]`: psql on the service's database (the embedded
server's own psql when embedded); the embedded server stays up while psql runs. Arguments
the command does not know go to psql (ops/cli.py passes them as `args.psql_args`)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil

from ops.command import Command, CommandError, no_arguments, run_command
from server.db.embedded import embedded_program
from server.db.pool import Database
from server.settings import Settings


def dbshell(settings: Settings, args: argparse.Namespace) -> int:
    async def body(settings: Settings, db: Database) -> int:
        psql = embedded_program("psql") if settings.embedded_database else shutil.which("psql")
        if psql is None:
            raise CommandError("psql not found on PATH")
        location = db.location
        process = await asyncio.create_subprocess_exec(
            psql, "-h", location.host, "-p", str(location.port), "-U", location.user,
            "-d", location.name, *args.psql_args,
            env={**os.environ, "PGPASSWORD": location.password})
        return await process.wait()
    return run_command("router-backend dbshell", body, settings=settings)


COMMAND = Command("dbshell", "open psql on the service's database; further arguments go to "
                  "psql, e.g. -c 'SELECT count(*) FROM routers'", no_arguments, dbshell)
