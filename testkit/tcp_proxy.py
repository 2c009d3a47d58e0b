"""A TCP proxy in front of the real PostgreSQL, so a test can make the database go away
(cut every connection, refuse new ones) and come back, without stopping a shared server."""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    def __init__(self, target_host: str, target_port: int):
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self.up = True
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> "TcpProxy":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        self.go_down()
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

    async def _open_target(self):
        if self.target_host.startswith("/"):
            path = f"{self.target_host}/.s.PGSQL.{self.target_port}"
            return await asyncio.open_unix_connection(path)
        return await asyncio.open_connection(self.target_host, self.target_port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.transport.abort()
            return
        target_reader, target_writer = await self._open_target()
        self._writers.update((writer, target_writer))
        await asyncio.gather(self._pipe(reader, target_writer), self._pipe(target_reader, writer),
                             return_exceptions=True)
        for w in (writer, target_writer):
            self._writers.discard(w)
            w.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.transport.abort()
