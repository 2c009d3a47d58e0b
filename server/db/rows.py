"""Multi-row INSERT ... VALUES statements bound on the client a row at a time.

psycopg parses a statement's placeholders again at every execution unless its text is at
most 4,096 bytes with at most 50 parameters (psycopg discussion 628): one statement of
hundreds of rows, each row with parameters of its own, cost ingestion about a tenth of its
time in that parse. Here a row's template, small and the same for every row, is bound by the
cursor's `mogrify` (its parse cached by psycopg), and the rows' texts are joined into one
statement: one statement per table still, as Citus plans onto the router's one shard (a
multi-row VALUES naming the MAC; issue 45).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import psycopg

Mogrify = Callable[[str, Any], str]


def mogrify_of(cursor: psycopg.Cursor | psycopg.AsyncCursor) -> Mogrify:
    """The cursor's `mogrify`: the pool's and the commands' cursors bind on the client
    (server/db/connect.py); one that binds on the server has none."""
    if not isinstance(cursor, (psycopg.ClientCursor, psycopg.AsyncClientCursor)):
        raise TypeError(f"{type(cursor).__name__} binds on the server: a RowsInsert is bound "
                        "by a ClientCursor")
    return cursor.mogrify


@dataclass(frozen=True)
class RowsInsert:
    """`statement`: the statement, `{values}` where the rows go and `shared`'s named
    parameters (%(name)s) elsewhere. `row`: one row, `%s` for each of its values in order and
    `{name}` for a value of `shared`. `rows`: each row's values."""
    statement: str
    row: str
    rows: Sequence[Sequence[Any]]
    shared: dict[str, Any]

    def text(self, cursor: psycopg.Cursor | psycopg.AsyncCursor) -> str:
        """The statement with every value bound by `cursor`, to send without parameters.
        Plain Python throughout (psycopg quotes in Python; a row of 64 flow ids full of
        quotes takes milliseconds): the writer calls it on a thread, off the event loop."""
        mogrify = mogrify_of(cursor)
        head, tail = self.statement.split("{values}")
        literals = {name: mogrify("%s", (value,)).replace("%", "%%")
                    for name, value in self.shared.items()}
        row = self.row.format_map(literals)
        return "".join((mogrify(head, self.shared),
                        ", ".join([mogrify(row, values) for values in self.rows]),
                        mogrify(tail, self.shared)))
