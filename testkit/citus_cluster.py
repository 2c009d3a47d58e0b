"""A Citus cluster on this machine for tests, drills and benchmarks: a coordinator and
workers, each a PostgreSQL of its own in a directory, built from the PostgreSQL installation
`pg_config` names, which must have the citus extension installed (docs/scaling.md: Citus
is the operator's to install, from Citus's packages; this project does not build it).

    python -m testkit.citus_cluster start DIR [--workers 2] [--port 9700]
    python -m testkit.citus_cluster stop DIR

starts one and prints the TEST_CITUS_* settings that point the tests at it; stops its
nodes. As root, the servers run as the `postgres` user, as PostgreSQL refuses to run as
root: DIR must then be a directory that user can reach (under /tmp, not under a directory
only root may enter).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from server.db.lifecycle import STARTUP_WAIT_SECONDS
from server.db.location import DatabaseLocation
from server.db.migrate import wait_until_reachable
from testkit.database import join_citus, migrated_database
from testkit.server import free_port

SETTINGS = {"shared_preload_libraries": "'citus'", "listen_addresses": "'127.0.0.1'",
            "max_connections": "300", "max_prepared_transactions": "300",
            # A maintenance daemon (a background worker) for each database using Citus: the
            # tests' many databases at once outnumber the default 8 ("could not start
            # maintenance background worker", and no 2PC recovery there).
            "max_worker_processes": "64",
            # Citus's default (online) shard move replicates logically (docs/scaling.md).
            "wal_level": "logical",
            "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
            # Nodes talk over loopback: no TLS between them (nor any client certificate
            # looked for in a home directory that is not the server user's).
            "citus.node_conninfo": "'sslmode=disable'"}


def pg_bindir() -> Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    return Path(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True,
                               check=True).stdout.strip())


def citus_installed() -> bool:
    """Whether the PostgreSQL that pg_config names has the citus extension installed."""
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return False
    share = subprocess.run([pg_config, "--sharedir"], capture_output=True, text=True,
                           check=True).stdout.strip()
    return (Path(share) / "extension" / "citus.control").exists()


class CitusCluster:
    """A coordinator on `port` and `workers` workers on the ports after it (free ports when
    `port` is None). With `citus` False, one plain PostgreSQL of the same installation and
    settings (what the benchmarks compare a cluster with)."""

    def __init__(self, directory: Path, workers: int = 2, port: int | None = None,
                 citus: bool = True, spare: int = 0):
        """`spare`: nodes started with the extension but not added to the cluster (the
        workers a scale-out adds), after the workers' ports."""
        self.directory = directory
        self.citus = citus
        workers = workers if citus else 0
        self.workers = workers
        nodes = workers + 1 + (spare if citus else 0)
        self.ports = ([free_port() for _ in range(nodes)] if port is None
                      else [port + n for n in range(nodes)])
        self.bindir = pg_bindir()
        self.user = "postgres" if os.geteuid() == 0 else None

    @property
    def coordinator(self) -> DatabaseLocation:
        return self.node(0)

    def node(self, index: int) -> DatabaseLocation:
        return DatabaseLocation("127.0.0.1", self.ports[index], "postgres", "postgres", "",
                                "disable")

    def _run(self, *args: str) -> None:
        env = {**os.environ, "HOME": str(self.directory)}
        result = subprocess.run([str(self.bindir / args[0]), *args[1:]], user=self.user,
                                env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {(result.stderr or result.stdout).strip()}")

    def _data(self, index: int) -> Path:
        return self.directory / f"node-{self.ports[index]}"

    def start(self) -> "CitusCluster":
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.user:
            account = pwd.getpwnam(self.user)
            os.chown(self.directory, account.pw_uid, account.pw_gid)
        for index, port in enumerate(self.ports):
            self._run("initdb", "-D", str(self._data(index)), "-U", "postgres",
                      "--auth=trust", "--no-sync")
            settings = SETTINGS if self.citus else {
                name: value for name, value in SETTINGS.items()
                if name not in ("shared_preload_libraries", "citus.node_conninfo")}
            with (self._data(index) / "postgresql.conf").open("a") as conf:
                for name, value in {**settings, "port": str(port),
                                    "unix_socket_directories": f"'{self.directory}'"}.items():
                    conf.write(f"{name} = {value}\n")
            self.start_node(index)
            wait_until_reachable(self.node(index), STARTUP_WAIT_SECONDS)
        if not self.citus:
            return self
        join_citus(self.coordinator,
                   tuple(self.node(index) for index in range(1, self.workers + 1)))
        return self

    @property
    def spare_nodes(self) -> list[DatabaseLocation]:
        return [self.node(index) for index in range(self.workers + 1, len(self.ports))]

    def start_node(self, index: int) -> None:
        self._run("pg_ctl", "-D", str(self._data(index)), "-w", "-t", "120",
                  "-l", str(self._data(index)) + ".log", "start")

    def stop_node(self, index: int) -> None:
        self._run("pg_ctl", "-D", str(self._data(index)), "-w", "-t", "120", "-m", "fast",
                  "stop")

    def stop(self) -> None:
        for index in range(len(self.ports)):
            if (self._data(index) / "postmaster.pid").exists():
                self.stop_node(index)

    @classmethod
    def stop_all(cls, directory: Path) -> None:
        """Stop every node of the cluster in `directory` (one started by another process)."""
        cluster = cls(directory, workers=0, port=0)
        for data in sorted(directory.glob("node-*")):
            if (data / "postmaster.pid").exists():
                cluster._run("pg_ctl", "-D", str(data), "-w", "-t", "120", "-m", "fast",
                             "stop")

    def environment(self, prefix: str = "TEST_CITUS_") -> dict[str, str]:
        return {f"{prefix}HOST": "127.0.0.1", f"{prefix}PORT": str(self.ports[0]),
                f"{prefix}USER": "postgres"}


@contextlib.contextmanager
def cluster_database(citus: bool = True) -> Iterator[tuple[DatabaseLocation, Path]]:
    """A migrated database on a cluster started for it (a coordinator with two workers, or
    with `citus` False one plain PostgreSQL of the same installation and settings) and a work
    directory, all removed afterwards: what a benchmark compares on the two."""
    directory = Path(tempfile.mkdtemp(prefix="citus-bench-"))
    cluster = CitusCluster(directory, citus=citus)
    try:
        cluster.start()
        with migrated_database(cluster.coordinator, "bench") as location:
            workdir = directory / "work"
            workdir.mkdir()
            yield location, workdir
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("directory", type=Path)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--port", type=int, default=9700)
    args = parser.parse_args()
    if args.action == "stop":
        CitusCluster.stop_all(args.directory)
        return 0
    if not citus_installed():
        print("the citus extension is not installed for the PostgreSQL pg_config names",
              file=sys.stderr)
        return 1
    cluster = CitusCluster(args.directory, args.workers, args.port).start()
    print(" ".join(f"{name}={value}" for name, value in cluster.environment().items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
