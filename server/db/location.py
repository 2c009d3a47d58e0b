"""Where the database is: connection parameters for psycopg and yoyo."""

from __future__ import annotations

import dataclasses
from urllib.parse import quote, urlencode

from server.settings import Settings


@dataclasses.dataclass(frozen=True)
class DatabaseLocation:
    host: str
    port: int
    name: str
    user: str
    password: str
    sslmode: str

    @classmethod
    def from_settings(cls, settings: Settings, host: str | None = None) -> "DatabaseLocation":
        return cls(host=host or settings.db_host or "", port=settings.db_port,
                   name=settings.db_name, user=settings.db_user,
                   password=settings.db_password, sslmode=settings.db_sslmode)

    def with_name(self, name: str) -> "DatabaseLocation":
        return dataclasses.replace(self, name=name)

    def connect_kwargs(self) -> dict[str, object]:
        """Keyword arguments for psycopg.connect (server/db/connect.py)."""
        kwargs: dict[str, object] = {"host": self.host, "port": self.port, "dbname": self.name,
                                     "user": self.user, "sslmode": self.sslmode}
        if self.password:
            kwargs["password"] = self.password
        return kwargs

    def dsn(self) -> str:
        """libpq keyword/value string; values quoted so spaces and quotes survive."""
        def quoted(value: object) -> str:
            text = str(value).replace("\\", "\\\\").replace("'", "\\'")
            return f"'{text}'"
        return " ".join(f"{key}={quoted(value)}" for key, value in self.connect_kwargs().items())

    def yoyo_url(self) -> str:
        query = urlencode({"host": self.host, "port": self.port, "sslmode": self.sslmode})
        credentials = quote(self.user, safe="")
        if self.password:
            credentials += ":" + quote(self.password, safe="")
        return f"postgresql+psycopg://{credentials}@/{quote(self.name, safe='')}?{query}"

    def describe(self) -> str:
        """For logs: everything but the password."""
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.name}"
