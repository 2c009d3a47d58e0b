"""The real server (`python -m ops.cli serve`) as a child process, on a free loopback port."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator, Mapping

from server.db.location import DatabaseLocation
from testkit import REPOSITORY
from testkit.database import (LOOPBACK_PROXY, NO_FLOOD_LIMITS, NO_PREPROCESS_AT_START,
                              database_env)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(process: subprocess.Popen, port: int, timeout: float = 60) -> bool:
    """Wait until something listens on the loopback port; False if `process` exited first or
    the time ran out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            if process.poll() is not None:
                return False
            time.sleep(0.05)
    return False


def embedded_env(data_dir: Path, **settings: str) -> dict[str, str]:
    """The environment of an operator's command on the embedded server of `data_dir` (a
    DB_HOST of the caller's environment left out)."""
    env = {**os.environ, "DATA_DIR": str(data_dir), "DB_LOG_LEVEL": "error", **settings}
    env.pop("DB_HOST", None)
    return env


def router_backend(env: Mapping[str, str], *args: str) -> subprocess.CompletedProcess:
    """`router-backend ARGS` as an operator runs it, in `env`; its output as text."""
    return subprocess.run([sys.executable, "-m", "ops", *args], env=dict(env), cwd=REPOSITORY,
                          capture_output=True, text=True, timeout=600)


def router_backend_output(env: Mapping[str, str], *args: str) -> str:
    """router_backend's standard output; RuntimeError with its error output when it fails."""
    done = router_backend(env, *args)
    if done.returncode != 0:
        raise RuntimeError(f"router-backend {' '.join(args)}: {done.stderr or done.stdout}")
    return done.stdout


def http_get(url: str, **headers: str) -> tuple[int, bytes]:
    """GET on a connection of its own: the status and the body, an error status included."""
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def memory_kib(pid: int, field: str) -> int:
    """VmRSS (current) or VmHWM (peak) resident memory of a process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


class ServerRunner:
    """`python -m ops.cli serve` as a child process on a free port, which a drill can kill,
    stop and start again on the same port."""

    def __init__(self, location: DatabaseLocation | None, data_dir: Path,
                 flood_limits: bool = False, checkout: Path = REPOSITORY,
                 python: str = sys.executable, **settings: str):
        """`location` None: the service's embedded PostgreSQL in `data_dir`. `flood_limits`:
        keep the service's default flood limits (else they are raised, as a load generator's
        fleet shares one address). `checkout` and `python`: another release's server, run
        from its own checkout with its own interpreter (bench/ingest_pair.py)."""
        self.port = free_port()
        self.checkout, self.python = checkout, python
        data_dir.mkdir(parents=True, exist_ok=True)
        environ = dict(os.environ)
        if location is None:  # no DB_HOST from the caller's environment: the embedded server
            environ.pop("DB_HOST", None)
        database = database_env(location) if location is not None else {}
        # One process unless a test or drill asks for the supervisor (HTTP_WORKERS).
        self.env = {**environ, **database, "DATA_DIR": str(data_dir),
                    "LISTEN_PORT": str(self.port), "DB_LOG_LEVEL": "error", "HTTP_WORKERS": "1",
                    **NO_PREPROCESS_AT_START, **LOOPBACK_PROXY,
                    **({} if flood_limits else NO_FLOOD_LIMITS),
                    **settings}
        # A file: an unread pipe would fill and stall the server.
        self.log_path = data_dir / f"server-{self.port}.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> "ServerRunner":
        with self.log_path.open("ab") as log:
            # A session of its own, as under systemd: signals sent to the test runner's
            # process group never reach the server or its supervisor's children.
            self.process = subprocess.Popen([self.python, "-m", "ops.cli", "serve"],
                                            env=self.env, stdout=log, stderr=log,
                                            cwd=self.checkout, start_new_session=True)
        deadline = time.monotonic() + timeout
        if not wait_listening(self.process, self.port, timeout):
            raise RuntimeError(f"server did not start listening: {self.log_tail()}")
        # Under the supervisor the port listens before its HTTP workers exist: wait for them.
        while not self.every_worker_serving():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"HTTP workers did not start serving: {self.log_tail()}")
            time.sleep(0.1)
        return self

    def every_worker_serving(self) -> bool:
        """Every HTTP worker of HTTP_WORKERS has logged that it serves (a single process
        serves once it listens)."""
        workers = int(self.env["HTTP_WORKERS"])
        if workers == 1:
            return True
        logged = {int(pid) for pid in re.findall(r"serving on \S+ \(pid (\d+)\)",
                                                 self.log_tail(1_000_000))}
        # A release before this one names its children otherwise: their log lines then.
        pids = self.children("serving") if self.checkout == REPOSITORY else sorted(logged)
        return len(pids) == workers and logged.issuperset(pids)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then wait for the graceful exit; returns the exit status."""
        if self.process is None:
            return 0
        self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise RuntimeError(f"server ignored SIGTERM for {timeout}s") from None

    def memory_kib(self, field: str) -> int:
        """VmRSS (current) or VmHWM (peak) resident memory of the server process."""
        return memory_kib(self.process.pid, field)

    def children(self, part: str) -> list[int]:
        """Pids of the supervisor's children running `part` (serving or working), from
        /proc."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                command = (entry / "cmdline").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue  # exited meanwhile
            if parent == self.process.pid and b"server.process.child" in command[:-1] and \
                    command[command.index(b"server.process.child") + 1] == part.encode():
                pids.append(int(entry.name))
        return sorted(pids)

    def log_tail(self, characters: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-characters:]


@contextlib.contextmanager
def running_server(location: DatabaseLocation, data_dir: Path, flood_limits: bool = False,
                   checkout: Path = REPOSITORY, python: str = sys.executable,
                   **settings: str) -> Iterator[ServerRunner]:
    """A started ServerRunner (its arguments), stopped afterwards."""
    runner = ServerRunner(location, data_dir, flood_limits=flood_limits, checkout=checkout,
                          python=python, **settings)
    try:  # one that fails to start is stopped too, its supervisor's children with it
        yield runner.start()
    finally:
        runner.stop()
