"""The supervisor: `router-backend serve` with HTTP_WORKERS > 1.

One process that serves nothing itself and keeps the host's service running:
- starts the embedded PostgreSQL once (when DB_HOST is unset), migrates once and creates the
  time partitions ahead, then hands its children the database as a server to connect to;
- listens on the address itself, one SO_REUSEPORT socket per HTTP worker slot (the kernel
  spreads new connections over them), then starts HTTP_WORKERS HTTP workers, each accepting
  from its slot's socket (inherited, `--listen-fds`), and one background process that runs
  the host's generation queue, scheduled jobs and notification retries. The sockets are the
  supervisor's: connections waiting in a dead worker's queue stay there for its replacement
  instead of being reset with it, so a worker that dies loses only the requests it was
  holding. (One socket shared by every worker keeps the queue too, but a burst of new
  connections goes to whichever worker wakes first: measured, 2 workers then served like 1.)
- restarts a child that dies at once, unless it died more than RESTART_BURST times within
  RESTART_WINDOW_SECONDS (a crash loop: bad configuration, a poisoned request ...): then
  after a delay that doubles, 1 s up to 30 s, as long as it keeps dying that often (the
  rule systemd applies to units, 5 starts in 10 s). An HTTP worker's slot closes its
  sockets for that delay (the connections queued there are reset) and opens new ones at
  the restart, so new connections go to the workers that serve instead of waiting;
- on SIGTERM or SIGINT passes SIGTERM on, so every child drains as a single process does,
  waits for them, and exits 0;
- collects every child's metrics in one directory (server/metrics.py), so one scrape of any
  worker reports the host;
- makes the file of flood limits its HTTP workers share (server/web/host_buckets.py), afresh
  at each start, so a router's requests count once whichever worker answers them.

Children are started by their own entry, `python -m server.process.child serving|working`
(server/process/child.py, the parts of server/app.py); they die with the supervisor
(PR_SET_PDEATHSIG), as a crashed service should.

Kept as our own rather than gunicorn with aiohttp's GunicornWebWorker: gunicorn runs HTTP
workers only, and this host also needs its one background process, the embedded database
started and migrated before any child, and the multiprocess metrics directory; the part
gunicorn would replace (start, restart with back-off, stop) is about a hundred lines here.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field

from prometheus_client.multiprocess import mark_process_dead

from engine.processes import die_with_parent
from server.db.connect import connect
from server.db.lifecycle import REVIVE_SECONDS, prepare_database, revive_once
from server.db.location import DatabaseLocation
from server.app import SERVING, WORKING, Part, connections_needed
from server.process.child import command as child_command
from server.settings import Settings
from server.web.connections import bound_sockets, listening_sockets
from server.web.host_buckets import make_table_file
from server.web.limits import HOST_TABLES

log = logging.getLogger("router_backend.supervisor")

POLL_SECONDS = 0.2
RESTART_BURST = 5              # deaths of one child within the window restarted at once
RESTART_WINDOW_SECONDS = 10.0
FIRST_DELAY_SECONDS = 1.0
MAX_DELAY_SECONDS = 30.0
STOP_MARGIN_SECONDS = 15.0     # beyond SHUTDOWN_GRACE_SECONDS before children are killed
OPERATOR_CONNECTIONS = 5       # router-backend commands run beside the service


@dataclass
class Child:
    part: Part                 # SERVING (an HTTP worker) or WORKING
    number: int
    process: subprocess.Popen | None = None
    started: float = 0.0
    deaths: list[float] = field(default_factory=list)  # within RESTART_WINDOW_SECONDS
    restart_at: float = 0.0
    # Its slot's listening sockets (HTTP workers only): the API's, and CONSOLE_LISTEN's.
    sockets: list[socket.socket] = field(default_factory=list)
    console_sockets: list[socket.socket] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"HTTP worker {self.number}" if self.part.serves else "background"


class Supervisor:
    def __init__(self, settings: Settings, workers: int):
        self._settings = settings
        self._workers = workers
        self._children = [Child(WORKING, 0)] + [Child(SERVING, n + 1)
                                                  for n in range(workers)]
        self._metrics_dir = settings.data_dir / "metrics"
        self._host_tables = settings.data_dir / "flood-limits"  # the HTTP workers' buckets
        self._stopping = False
        self._stop_signal: str | None = None

    def run(self) -> int:
        connections = self.connections_needed()
        # From here a stop signal is noted, not raised: a KeyboardInterrupt landing inside the
        # embedded server's start or a migration could leave either half-done. The start-up
        # finishes (or fails: Ctrl-C reaches initdb and pg_ctl too), then everything stops.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_stop_signal)
        try:
            location, embedded = prepare_database(self._settings, connections, migrate=True)
        except Exception:
            self._raise_if_interrupted()
            raise
        try:
            if self._stopping:
                log.info("supervisor %d: %s during start-up", os.getpid(), self._stop_signal)
                self._raise_if_interrupted()
                return 0
            check_connections(location, connections)
            self._listen()
            self._prepare_metrics_dir()
            make_table_file(self._host_tables, HOST_TABLES)
            environment = self._child_environment(location)
            for child in self._children:
                self._start(child, environment)
            log.info("supervisor %d: serving on %s:%s with %d HTTP workers (pids %s) and a "
                     "background process (pid %d)", os.getpid(), self._settings.listen_host,
                     self._settings.listen_port, len(self._children) - 1,
                     ", ".join(str(c.process.pid) for c in self._children[1:]),
                     self._children[0].process.pid)
            revive_at = 0.0
            while not self._stopping:
                self._watch(environment)
                if embedded is not None and time.monotonic() >= revive_at:
                    revive_at = time.monotonic() + REVIVE_SECONDS
                    try:
                        revive_once(embedded)
                    except Exception as error:  # the next round tries again
                        log.warning("embedded PostgreSQL not started again yet: %s", error)
                time.sleep(POLL_SECONDS)
            self._stop_children()
        finally:
            self._close_sockets()
            if embedded is not None:
                embedded.stop()
        log.info("supervisor %d: stopped", os.getpid())
        return 0

    def connections_needed(self) -> int:
        """The most connections the host's processes open, summed from their parts
        (server/app.py Part), and a few for operators' commands."""
        return sum(connections_needed(self._settings, (child.part,))
                   for child in self._children) + OPERATOR_CONNECTIONS

    def _listen(self) -> None:
        refuse_taken_listeners(self._settings)
        for child in self._children[1:]:
            self._open_sockets(child)

    def _open_sockets(self, child: Child) -> None:
        """An HTTP worker slot's listening sockets."""
        settings = self._settings
        child.sockets = listening_sockets(settings.listen_host, settings.listen_port)
        if settings.console and settings.console_listen is not None:
            child.console_sockets = listening_sockets(*settings.console_listen)

    def _close_sockets(self, children: list[Child] | None = None) -> None:
        for child in self._children if children is None else children:
            for sock in child.sockets + child.console_sockets:
                sock.close()
            child.sockets, child.console_sockets = [], []

    def _raise_if_interrupted(self) -> None:
        """Ctrl-C during start-up ends the command as Ctrl-C before it (ops/cli.py)."""
        if self._stop_signal == "SIGINT":
            raise KeyboardInterrupt

    def _on_stop_signal(self, signum, frame) -> None:
        self._stopping = True
        self._stop_signal = signal.Signals(signum).name

    def _prepare_metrics_dir(self) -> None:
        """Empty: counters of an earlier run must not be added to this one's."""
        shutil.rmtree(self._metrics_dir, ignore_errors=True)
        self._metrics_dir.mkdir(parents=True)

    def _child_environment(self, location: DatabaseLocation) -> dict[str, str]:
        """The supervisor's environment, plus where the database is (the embedded server is
        the supervisor's: children connect to it like to any server) and the metrics
        directory, which prometheus_client reads when a child imports it; HTTP_WORKERS as
        started (`serve --workers` may say otherwise), which a worker's shares follow."""
        return {**os.environ, "HTTP_WORKERS": str(self._workers),
                "DB_HOST": location.host, "DB_PORT": str(location.port),
                "DB_NAME": location.name, "DB_USER": location.user,
                "DB_PASSWORD": location.password, "DB_SSLMODE": location.sslmode,
                "PROMETHEUS_MULTIPROC_DIR": str(self._metrics_dir)}

    def _start(self, child: Child, environment: dict[str, str]) -> None:
        if child.part.serves and not child.sockets:  # closed for a crash loop's delay
            self._open_sockets(child)
        command = child_command(child.part, str(self._metrics_dir),
                                fds_argument(child.sockets), fds_argument(child.console_sockets),
                                str(self._host_tables))
        inherited = [sock.fileno() for sock in child.sockets + child.console_sockets]
        # A session of its own: a terminal's Ctrl-C reaches the supervisor alone, which stops
        # its children in order (SIGTERM) rather than each of them dying mid-start.
        child.process = subprocess.Popen(
            command, env=environment, pass_fds=inherited, start_new_session=True,
            preexec_fn=functools.partial(die_with_parent, os.getpid()))
        child.started = time.monotonic()

    def _watch(self, environment: dict[str, str]) -> None:
        now = time.monotonic()
        for child in self._children:
            if child.process is not None and child.process.poll() is not None:
                self._on_death(child, now)
            if child.process is None and now >= child.restart_at and not self._stopping:
                self._start(child, environment)
                log.info("%s restarted (pid %d)", child.name, child.process.pid)

    def _on_death(self, child: Child, now: float) -> None:
        process, lived = child.process, now - child.started
        mark_process_dead(process.pid, str(self._metrics_dir))
        child.process = None
        child.deaths = [t for t in child.deaths if now - t < RESTART_WINDOW_SECONDS] + [now]
        delay = restart_delay(len(child.deaths))
        child.restart_at = now + delay
        if delay:
            self._close_sockets([child])
        log.warning("%s (pid %d) exited with %s after %.1fs; restarting in %.0fs", child.name,
                    process.pid, describe_status(process.returncode), lived, delay)

    def _stop_children(self) -> None:
        running = [c.process for c in self._children if c.process is not None]
        log.info("supervisor %d: %s received, stopping %d processes", os.getpid(),
                 self._stop_signal, len(running))
        # Our copies first: once the workers close theirs as their drain begins, the port
        # refuses new connections instead of queueing them for nobody.
        self._close_sockets()
        for process in running:
            _signal(process, signal.SIGTERM)
        deadline = time.monotonic() + self._settings.shutdown_grace_seconds + STOP_MARGIN_SECONDS
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("pid %d still running after the grace period; killing it",
                          process.pid)
                _signal(process, signal.SIGKILL)
                process.wait()


def restart_delay(recent_deaths: int) -> float:
    """At once within the burst; beyond it 1, 2, 4 ... up to MAX_DELAY_SECONDS."""
    beyond = recent_deaths - RESTART_BURST
    return 0.0 if beyond <= 0 else min(MAX_DELAY_SECONDS, FIRST_DELAY_SECONDS * 2 ** (beyond - 1))


def check_connections(location: DatabaseLocation, needed: int) -> None:
    """Warn when the database server allows fewer connections than the workers may open:
    past its limit, requests would get 503."""
    conn = connect(location)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT current_setting('max_connections')::int - "
                        "current_setting('superuser_reserved_connections')::int")
            allowed = cur.fetchone()[0]
    finally:
        conn.close()
    if allowed < needed:
        log.warning("the database allows %d connections and the workers may open %d: raise "
                    "its max_connections, or lower DB_POOL_MAX, INGEST_DB_POOL_MAX or "
                    "HTTP_WORKERS", allowed, needed)


def refuse_taken(host: str, port: int) -> None:
    """OSError when another process listens on the address, even with SO_REUSEPORT (which
    would otherwise let a second service share the port and take some of its connections):
    a socket without it cannot bind there then."""
    for probe in bound_sockets(host, port, backlog=None):
        probe.close()


def refuse_taken_listeners(settings: Settings) -> None:
    """OSError naming the setting when the service's address (LISTEN_HOST:LISTEN_PORT) or its
    console's (CONSOLE_LISTEN) is taken: checked before the database is touched."""
    listeners = [((settings.listen_host, settings.listen_port), "LISTEN_PORT")]
    if settings.console and settings.console_listen is not None:
        listeners.append((settings.console_listen, "CONSOLE_LISTEN"))
    for (host, port), setting in listeners:
        try:
            refuse_taken(host, port)
        except OSError as error:
            raise OSError(f"{error} (another service listens there: stop it, or set "
                          f"{setting})") from None


def fds_argument(sockets: list[socket.socket]) -> str:
    return ",".join(str(sock.fileno()) for sock in sockets)


def describe_status(returncode: int) -> str:
    if returncode < 0:
        return f"signal {signal.Signals(-returncode).name}"
    return f"status {returncode}"


def _signal(process: subprocess.Popen, signum: int) -> None:
    try:
        process.send_signal(signum)
    except ProcessLookupError:
        pass
