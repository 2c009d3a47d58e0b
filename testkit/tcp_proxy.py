"""A TCP proxy in front of the real PostgreSQL, so a test can make the database go away
without stopping a shared server: `go_down` closes every connection and refuses new ones (the
server is gone); `cut` lets nothing through either way and closes nothing (the network
between is cut: the peers hear nothing until their timeouts, or until `restore`)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from server.db.location import DatabaseLocation


class TcpProxy:
    def __init__(self, target_host: str, target_port: int):
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self.up = True
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        # One gate per direction of each open connection; `_held`: those closed for now.
        self._gates: dict[str, set[asyncio.Event]] = {"to_server": set(), "to_client": set()}
        self._held: set[asyncio.Event] = set()
        self._lose_after: tuple[bytes, str] | None = None

    async def start(self) -> "TcpProxy":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def location(self, database: DatabaseLocation) -> DatabaseLocation:
        """`database` as reached through this proxy."""
        return dataclasses.replace(database, host="127.0.0.1", port=self.port,
                                   sslmode="disable")

    async def close(self) -> None:
        self.go_down()
        self._flowing.set()  # what waited for a restore now finds the proxy down
        if self._server:
            self._server.close()
            await self._server.wait_closed()

    def go_down(self) -> None:
        """The database 'goes away': live connections drop, new ones are refused."""
        self.up = False
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def come_back(self) -> None:
        self.up = True

    def cut(self) -> None:
        """Bytes in flight and new connections wait (as dropped packets do) until restore()."""
        self._flowing.clear()

    def open_connections(self) -> int:
        return len(self._gates["to_client"])

    def hold_open_connections(self, direction: str) -> None:
        """What the connections open now send one way (`to_server` or `to_client`) waits
        until restore(), as if a network lost it; new connections pass. `to_client`: a
        statement runs (and commits) but its answer never arrives."""
        for gate in self._gates[direction]:
            gate.clear()
            self._held.add(gate)

    def lose_when_sent(self, marker: bytes, direction: str) -> None:
        """From now on, on a connection whose client sends bytes holding `marker`, what goes
        `direction` waits from then until restore(): `to_server`, that statement never
        arrives; `to_client`, it runs (and commits) but its answer never arrives. Unlike
        hold_open_connections, the exchanges before it (a pool's check of the connection)
        pass."""
        self._lose_after = (marker, direction)

    def restore(self) -> None:
        self._lose_after = None
        self._flowing.set()
        for gate in self._held:
            gate.set()
        self._held.clear()

    async def _open_target(self):
        if self.target_host.startswith("/"):
            path = f"{self.target_host}/.s.PGSQL.{self.target_port}"
            return await asyncio.open_unix_connection(path)
        return await asyncio.open_connection(self.target_host, self.target_port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Ending quietly when the test's loop closes with connections still open: asyncio
        # otherwise logs each cancelled handler as an error in the test's teardown.
        with contextlib.suppress(asyncio.CancelledError):
            await self._relay(reader, writer)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._flowing.wait()
        if not self.up:
            writer.transport.abort()
            return
        try:
            target_reader, target_writer = await self._open_target()
        except OSError:  # the server is stopped (restarting): refused, as it would be
            writer.transport.abort()
            return
        self._writers.update((writer, target_writer))
        gates = {"to_server": asyncio.Event(), "to_client": asyncio.Event()}
        for direction, gate in gates.items():
            gate.set()
            self._gates[direction].add(gate)
        await asyncio.gather(self._pipe(reader, target_writer, gates["to_server"], gates),
                             self._pipe(target_reader, writer, gates["to_client"]),
                             return_exceptions=True)
        for direction, gate in gates.items():
            self._gates[direction].discard(gate)
        for w in (writer, target_writer):
            self._writers.discard(w)
            w.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    gate: asyncio.Event, watched: dict[str, asyncio.Event] | None = None
                    ) -> None:
        """`watched`: the connection's gates, on the client's side, for lose_when_sent."""
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                if watched is not None and self._lose_after and self._lose_after[0] in data:
                    watched[self._lose_after[1]].clear()
                    self._held.add(watched[self._lose_after[1]])
                await self._flowing.wait()
                await gate.wait()
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
