"""Connections to PostgreSQL through psycopg 3, made alike for the service's pool, its
sessions and the blocking connections of commands, migrations and tests.

Parameters are bound on the client (`ClientCursor`): an upload's statements go as one text
in one round trip, one implicit transaction. Addresses (inet, cidr) and uuids come back as
text, as the queries' callers compare and print them; json decoded.
"""

from __future__ import annotations

import psycopg
from psycopg.types.string import TextLoader

from server.db.location import DatabaseLocation

TYPES_AS_TEXT = ("inet", "cidr", "uuid")


def adapt(conn: psycopg.BaseConnection) -> None:
    """How values come back on `conn`."""
    for name in TYPES_AS_TEXT:
        conn.adapters.register_loader(name, TextLoader)


def connect(location: DatabaseLocation, autocommit: bool = False,
            timeout: float | None = None) -> psycopg.Connection:
    """A blocking connection (commands, migrations, tests). `timeout`: for connecting, in
    seconds (at least 1)."""
    options = {"connect_timeout": max(1, round(timeout))} if timeout else {}
    conn = psycopg.connect(**location.connect_kwargs(), **options, autocommit=autocommit,
                           cursor_factory=psycopg.ClientCursor)
    adapt(conn)
    return conn


async def connect_async(location: DatabaseLocation, timeout: float) -> psycopg.AsyncConnection:
    """A connection of the event loop's own, outside the pool, in autocommit."""
    conn = await psycopg.AsyncConnection.connect(
        **location.connect_kwargs(), connect_timeout=max(1, round(timeout)), autocommit=True,
        cursor_factory=psycopg.AsyncClientCursor)
    adapt(conn)
    return conn


def execute_alone(location: DatabaseLocation, statement, params=None) -> list[tuple]:
    """One statement on a connection of its own, outside a transaction (CREATE DATABASE,
    Citus's node functions), and its rows. The server's warnings are added to the error it
    raises as notes: Citus names a worker's own error only in a warning ("tuple concurrently
    updated" behind "failure on connection marked as essential"), which psycopg drops unless
    a notice handler keeps it."""
    conn = connect(location, autocommit=True)
    warnings: list[str] = []
    conn.add_notice_handler(lambda notice: warnings.append(
        f"{notice.severity}: {notice.message_primary}"
        + (f" ({notice.message_detail})" if notice.message_detail else "")))
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []
    except psycopg.Error as error:
        for warning in warnings:
            error.add_note(warning)
        raise
    finally:
        conn.close()
