"""Run the real server command (`python -m ops.cli serve`) as a child process for tests that
need a separate process: memory measurement, kills, restarts, several servers at once."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from server.db.location import DatabaseLocation


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    def __init__(self, location: DatabaseLocation, data_dir: Path, **settings: str):
        self.port = free_port()
        self.env = {**os.environ, "DB_HOST": location.host, "DB_PORT": str(location.port),
                    "DB_NAME": location.name, "DB_USER": location.user,
                    "DB_PASSWORD": location.password, "DB_SSLMODE": location.sslmode,
                    "DATA_DIR": str(data_dir), "LISTEN_PORT": str(self.port), **settings}
        self.log_path = data_dir / f"server-{self.port}.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> "ServerProcess":
        with self.log_path.open("ab") as log:  # the child keeps its own copy of the handle
            self.process = subprocess.Popen([sys.executable, "-m", "ops.cli", "serve"],
                                            env=self.env, stdout=log, stderr=log)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("server did not start listening")

    def stop(self) -> int:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                return self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait() if self.process else 0

    def memory_kib(self, field: str) -> int:
        """VmRSS (current) or VmHWM (peak) resident memory of the server process."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)
