"""Service settings: one immutable, typed object built at start-up.

Every setting is declared once, as a field of ``Settings`` (its name the environment
variable's in lower case, its type what its parser returns, its default as text, its help,
under its section's heading); the fields make ``SETTINGS`` and ``SECTIONS``,
``load_settings``, the tables of docs/settings.md, the example environment file and
``tests/test_settings.py``. A type checker and an editor see every field.
No other module reads the environment: it is given a ``Settings`` object instead.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import os
import re
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Mapping

from cronsim import CronSim, CronSimError


class SettingsError(ValueError):
    """A setting has a value the service cannot run with; the message names the variable."""


def _text(value: str) -> str:
    return value


def _optional_text(value: str) -> str | None:
    return value or None


def _integer(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"expected an integer, got {value!r}") from None
        if number < minimum or (maximum is not None and number > maximum):
            upper = "" if maximum is None else f" and at most {maximum}"
            raise ValueError(f"expected at least {minimum}{upper}, got {number}")
        return number

    return parse


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's cpuset counts, a
    CPU quota does not), what `auto` settings count."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _workers(value: str) -> int:
    if value.strip().lower() == "auto":
        return host_cores()
    return _integer(1, 256)(value)


def _auto_or_integer(value: str) -> int | None:
    """None for `auto` (resolved where the setting is used), else an integer of at least 1."""
    return None if value.strip().lower() == "auto" else _integer(1, 1024)(value)


def _boolean(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        lowered = value.strip().lower()
        if lowered not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}, got {value!r}")
        return lowered

    return parse


def _secret(minimum: int) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value and len(value) < minimum:
            raise ValueError(f"expected at least {minimum} characters (or unset)")
        return value

    return parse


def _networks(value: str) -> frozenset[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    try:  # a frozenset: its hash is kept, so server/web/peers.py's cache keys on it cheaply
        return frozenset(ipaddress.ip_network(part.strip(), strict=False)
                         for part in value.split(",") if part.strip())
    except ValueError as error:
        raise ValueError(f"expected addresses or networks separated by commas ({error})") \
            from None


def _fraction(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a number, got {value!r}") from None
    if not 0 < number <= 1:
        raise ValueError(f"expected a share above 0 and at most 1, got {value!r}")
    return number


def _cron(value: str) -> str:
    try:
        CronSim(value, datetime.now())
    except (CronSimError, ValueError) as error:
        raise ValueError(f"not a valid cron expression {value!r} ({error})") from None
    return value


def _cron_or_off(value: str) -> str:
    """A cron expression, or `off` (read as ""): the job never runs by itself."""
    return "" if value.strip().lower() == "off" else _cron(value)


def _services(value: str) -> frozenset[str]:
    names = frozenset(part.strip().lower() for part in value.split(",") if part.strip())
    if not names or not names <= {"router", "notifications"}:
        raise ValueError(f"expected router, notifications or both, got {value!r}")
    return names


def _path(value: str) -> Path:
    return Path(value).expanduser()


def _optional_path(value: str) -> Path | None:
    return Path(value).expanduser() if value else None


def _log_config(value: str) -> Path | None:
    """A JSON file for logging.config.dictConfig, read now so that a broken one stops the
    start with its reason rather than the first log line."""
    path = _optional_path(value)
    if path is None:
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None
    if not isinstance(config, dict) or config.get("version") != 1:
        raise ValueError(f"{path}: expected a JSON object with \"version\": 1 "
                         f"(logging.config.dictConfig)")
    return path


CONSOLE_ROLES = ("support", "operator")
# A console credential as `router-backend console credential` prints it (server/console/auth.py).
_CONSOLE_HASH = re.compile(r"scrypt\$\d+\$\d+\$\d+\$[A-Za-z0-9_=-]+\$[A-Za-z0-9_=-]+")


def _console_users(value: str) -> tuple[tuple[str, str, str], ...]:
    users = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        name, role, digest = (entry.split(":") + ["", ""])[:3]
        if not re.fullmatch(r"[A-Za-z0-9._@-]{1,64}", name) or role not in CONSOLE_ROLES \
                or not _CONSOLE_HASH.fullmatch(digest):
            raise ValueError(f"expected NAME:ROLE:HASH entries separated by commas, ROLE one of "
                             f"{', '.join(CONSOLE_ROLES)} and HASH as `router-backend console "
                             f"credential` prints it; got {entry[:40]!r}")
        if name in (user[0] for user in users):
            raise ValueError(f"{name} is listed twice")
        users.append((name, role, digest))
    return tuple(users)


def _listener(value: str) -> tuple[str, int] | None:
    if not value:
        return None
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), _integer(1, 65535)(port)


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    default: str
    help: str
    parse: Callable[[str], Any]
    section: str = ""   # set from SECTIONS

    @property
    def attribute(self) -> str:
        return self.name.lower()


ET_OPEN_BASE = "https://rules.emergingthreats.net/open/suricata-7.0.3"


def _section(title: str) -> Callable[[str, Callable[[str], Any], str], Any]:
    """How a setting is declared under `title`, its heading in docs/settings.md: a field of
    `Settings` holding its default (as the environment would give it), its parser and its
    help, from which load_settings, the documentation and the example file are made."""
    def declare(default: str, parse: Callable[[str], Any], help: str) -> Any:
        return dataclasses.field(metadata={"setting": Setting("", default, help, parse, title)})
    return declare


_server = _section("Server and processes")
_routers = _section("Routers: registration, keys and limits")
_database = _section("Database")
_ingestion = _section("Telemetry ingestion")
_generation = _section("Rule data and generation")
_notifications = _section("Notifications")
_retention = _section("Retention and partitions")
_at_rest = _section("Telemetry at rest")
_console = _section("Console")
_fleet = _section("Fleet defence")
_intel = _section("Threat intelligence")


@dataclasses.dataclass(frozen=True)
class Settings:
    """One immutable field per setting, named as its variable in lower case and typed as its
    parser returns, under the sections of its documentation (docs/settings.md, the example
    environment file), in order. Names the product's original specification gave (RULE_*,
    RETENTION_*) are kept as they are. Beside them, `chosen`: the names given a value (the
    environment, the .env file) rather than left at their default, and `given`: those values
    as written, (name, text) pairs."""

    # Server and processes
    listen_host: str = _server("127.0.0.1", _text,
        "Address the HTTP server listens on.")
    listen_port: int = _server("8080", _integer(1, 65535),
        "TCP port the HTTP server listens on.")
    http_workers: int = _server("auto", _workers,
        "HTTP worker processes under one supervising process, "
        "which listens on the address for them (a socket per worker, kept when one "
        "dies) and also runs the one generation queue, the scheduled jobs and the "
        "notification retries of the host in a background process. `auto`: one per CPU core it may run on. 1: a single process does "
        "everything. `router-backend serve --workers N` overrides it.")
    shutdown_grace_seconds: int = _server("30", _integer(0),
        "On SIGTERM, how long requests and generations in "
        "progress may take to finish (new connections are refused meanwhile) before the "
        "process exits anyway.")
    http_idle_timeout_seconds: int = _server("15", _integer(1),
        "Longest wait for a complete request head, from "
        "connecting or from the previous response: a connection that sends its headers "
        "slower than this, or sits idle this long, is closed.")
    http_max_connections: int = _server("0", _integer(0),
        "Most client connections one HTTP worker holds; past it each new connection closes "
        "the worker's oldest (a request in progress is answered first). 0: the process's "
        "descriptor limit (its soft limit raised to the hard one) less 256 and its database "
        "connections, so a worker never runs out of descriptors.")
    data_dir: Path = _server("./var", _path,
        "Directory for what the service keeps on local disk (the "
        "embedded database, the email outbox).")
    services: frozenset[str] = _server("router,notifications", _services,
        "Which APIs this process serves: `router`, "
        "`notifications`, or both (comma-separated).")
    metrics_token: str = _server("", _secret(16),
        "When set, GET /metrics also answers clients that send "
        "`Authorization: Bearer <token>` (a Prometheus on another host). Without it, only "
        "loopback clients that did not come through a proxy are answered.")
    log_config: Path | None = _server("", _log_config,
        "A JSON file for Python's logging.config.dictConfig, applied at "
        "start instead of the default: INFO and up to stderr, access lines included, "
        "written in batches (docs/operations.md, Logs).")
    # Routers: registration, keys and limits
    registration_mode: str = _routers("open", _choice("open", "closed"),
        "`open`: a router is registered the first time it "
        "calls with a valid MAC. `closed`: only routers an operator subscribed may call "
        "(others get 403).")
    router_cache_seconds: int = _routers("30", _integer(0),
        "How long a server process trusts its memory of a "
        "router's registration (closed mode; open mode registers once) or of its key "
        "before asking the database again (a key rotated or revoked, or a router "
        "removed, is forgotten at once, by notification; this bounds it while "
        "notifications are down).")
    router_auth: str = _routers("mac", _choice("mac", "key"),
        "`mac`: a router is whoever sends its MAC in X-ID (the "
        "seed's behaviour). `key`: every router endpoint but /health also needs "
        "`Authorization: Bearer <router key>` (see docs/security.md).")
    enrollment_token: str = _routers("", _secret(16),
        "Fleet-wide secret (at least 16 characters) with which a "
        "router gets its key once from POST /enroll. Unset: enrollment is off and keys "
        "come only from `router-backend subscriptions add`.")
    enrollment_reset_window_minutes: int = _routers("60", _integer(1),
        "After `router-backend subscriptions "
        "reset MAC`, how long that router may enroll again; later enrollment of it is 409 "
        "until the next reset.")
    trusted_proxies: frozenset[ipaddress.IPv4Network | ipaddress.IPv6Network] = _routers(
        "", _networks,
        "Comma-separated addresses or networks of the reverse "
        "proxies in front (Caddy): for their requests the client address is read from "
        "X-Forwarded-For. Empty (the default): the connection's address always, so no "
        "client, not even a local one, chooses the address its limits count against; "
        "the shipped deployments name their proxy (127.0.0.1/32,::1/128 for Caddy on "
        "the same host).")
    router_requests_per_minute: int = _routers("120", _integer(1),
        "Requests one router may make per minute (a "
        "minute's worth at once, then this rate), counted once for the host's HTTP "
        "workers (per host); beyond: 429 with Retry-After. /health and /enroll are not "
        "counted.")
    router_records_per_minute: int = _routers("100000", _integer(1),
        "Telemetry records one router may send per "
        "minute, counted once for the host's HTTP workers (so also the most one body may "
        "hold); the request that goes beyond is refused whole with 429.")
    registrations_per_minute_per_address: int = _routers("30", _integer(1),
        "New routers one client address may "
        "register (by a first call or an enrollment) per minute in open mode, counted in "
        "the database across every server process (429 beyond; routers already registered "
        "are not affected).")
    failed_credentials_per_minute_per_address: int = _routers("10", _integer(1),
        "Wrong router keys and "
        "enrollment tokens one client address may present per minute, counted once for "
        "the host's HTTP workers; beyond, its requests without a key the answering process "
        "already trusts get 429 with Retry-After until the allowance refills.")
    too_many_requests_delay_seconds: int = _routers("1", _integer(0, 10),
        "How long a 429 (any flood, registration or "
        "upload limit) waits before it is sent, at most its Retry-After, so that a client sending "
        "again as soon as it is refused gets at most one answer a second on a connection "
        "(a refusal costs the server its request's parse and body); Retry-After still "
        "counts from the request. 0 answers at once.")
    ipv6_limit_prefix: int = _routers("64", _integer(1, 128),
        "Per-address limits count IPv6 clients per network of "
        "this prefix length (a subscriber's /64), not per address.")
    # Database
    db_host: str | None = _database("", _optional_text,
        "PostgreSQL host name or socket directory. Unset: the service "
        "starts its own embedded PostgreSQL in DATA_DIR/postgres.")
    db_port: int = _database("5432", _integer(1, 65535),
        "PostgreSQL port.")
    db_wal_archive_dir: Path | None = _database("", _optional_path,
        "Embedded PostgreSQL only: a directory (best on another "
        "disk) where the server archives every WAL segment, at least once a minute, for "
        "point-in-time recovery from a `router-backend backup --base` "
        "(docs/operations.md). Empty: no archiving.")
    db_name: str = _database("router_backend", _text,
        "Database name; created when it does not exist.")
    db_user: str = _database("postgres", _text,
        "Database user.")
    db_password: str = _database("", _text,
        "Database password.")
    db_sslmode: str = _database(
        "prefer", _choice("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
        "libpq sslmode (disable, allow, prefer, require, "
        "verify-ca, verify-full).")
    db_log_level: str = _database("warning", _choice("silent", "error", "warning", "info"),
        "Database logging: silent, error, warning or info (info "
        "logs every statement).")
    db_pool_min: int = _database("1", _integer(0),
        "Connections each server process keeps open.")
    db_pool_max: int = _database("20", _integer(1),
        "Most connections one server process opens.")
    ingest_db_pool_max: int = _database("10", _integer(1),
        "Most connections telemetry uploads hold at once, from "
        "a pool of their own beside DB_POOL_MAX's, so uploads (even stalled ones) never "
        "take the connections that polls, health checks and generation need; further "
        "uploads wait up to DB_TIMEOUT_SECONDS, then get 503. One more is kept for a "
        "router served under half the average lately (an honest one beside a flood) whose "
        "upload is all read.")
    ingest_writes_at_once: int | None = _database("auto", _auto_or_integer,
        "Statements of telemetry uploads one server "
        "process runs in the database at once; when more wait, the router served the "
        "fewest records lately goes next, so that a fleet of cheap MACs flooding at full "
        "speed does not queue an honest router's upload behind its own in the database, "
        "and one more for a router served under half the average lately, which then waits "
        "for no flooder's statement to end. A statement running longer than a second "
        "stops counting (it may be waiting on another upload's locks); one that has waited "
        "5 s goes first. `auto`: the CPU "
        "cores the process may run on shared among HTTP_WORKERS, at least 1 (the "
        "database on the same host; raise it for a larger database server).")
    db_timeout_seconds: int = _database("30", _integer(1),
        "Longest wait for a connection or one statement before "
        "the request fails with 503; a statement that outlasts it is cancelled on the "
        "server first (up to 10 s more when the server does not answer).")
    db_retry_after_seconds: int = _database("5", _integer(1),
        "Retry-After sent with 503 when the database is "
        "unreachable.")
    # Telemetry ingestion
    ingest_max_body_bytes: int = _ingestion(str(256 * 1024 * 1024), _integer(1),
        "Largest telemetry body accepted, "
        "counted after gzip decoding (413 beyond).")
    ingest_max_record_bytes: int = _ingestion(str(1024 * 1024), _integer(64),
        "Largest single record; longer ones "
        "are rejected and reported, the rest of the body goes on.")
    ingest_batch_rows: int = _ingestion("2000", _integer(1),
        "Most records per chunk (one row) written while a "
        "body streams in.")
    ingest_body_idle_seconds: int = _ingestion("15", _integer(1),
        "Longest pause between two pieces of a telemetry "
        "body: a body that stalls longer is answered 408, its transaction rolled back and "
        "its connection closed.")
    ingest_max_gzip_ratio: int = _ingestion("200", _integer(1),
        "Largest decoded-to-received size ratio of a gzip "
        "body (the first 64 KiB decoded are free); beyond it the body is refused with 413 "
        "as it arrives. Real EVE output compresses 10-25 times.")
    ingest_max_uploads_per_router: int = _ingestion("2", _integer(1),
        "Telemetry uploads one router may have in "
        "progress at once in one server process; more are answered 429 with Retry-After "
        "(an agent uploads one body at a time).")
    ingest_max_uploads_per_address: int = _ingestion("8", _integer(1),
        "Telemetry uploads one client address (an "
        "IPv6 /IPV6_LIMIT_PREFIX network) may have in progress at once in one server "
        "process, whatever its MACs; more are answered 429 with Retry-After. Keep it below "
        "INGEST_DB_POOL_MAX, so one client's stalled uploads cannot hold every ingestion "
        "connection; raise it for many routers behind one carrier-grade NAT address.")
    ingest_max_reported_errors: int = _ingestion("100", _integer(0),
        "Most per-record errors listed in one "
        "response (the rejected count is always exact).")
    ingest_idempotency_key_days: int = _ingestion("7", _integer(1),
        "How long a telemetry upload's Idempotency-Key "
        "is kept, so that a retry is answered from it instead of storing again: longer "
        "than any agent keeps a batch spooled. Expired keys are deleted by the hourly "
        "`upload-keys` job.")
    # Rule data and generation
    rule_data_dir: Path | None = _generation("", _optional_path,
        "Working directory for rule data (rules/, rulefile_json/, "
        "idps_rules/). Unset: DATA_DIR/ruledata.")
    rule_preprocess_archive_url: str = _generation(f"{ET_OPEN_BASE}/emerging.rules.tar.gz", _text,
        "Download "
        "URL of the open rule archive (zip or tar.gz).")
    rule_preprocess_version_url: str = _generation(f"{ET_OPEN_BASE}/version.txt", _text,
        "Version stamp of "
        "the rule archive.")
    rule_preprocess_cron_schedule: str = _generation("0 0 * * 0", _cron_or_off,
        "Cron spec of the preprocess job (the ruleset's download). `off`: the service never "
        "downloads it, neither by schedule nor at start (a host without internet access: "
        "publish with `rulepreprocess --archive`).")
    rule_preprocess_at_start: bool = _generation("true", _boolean,
        "When no ruleset was ever published, run the "
        "preprocess job soon after start-up (once across processes, retried with backoff "
        "up to JOB_RETRY_DELAY_SECONDS while it fails) instead of waiting for its first "
        "cron tick.")
    rule_generation_sample_count: int = _generation("550", _integer(1),
        "IDS rules sampled per router.")
    rule_generation_max_concurrent: int = _generation("1", _integer(1),
        "Worker processes of the generation queue.")
    rule_generation_queue_capacity: int = _generation("64", _integer(1),
        "Buffered depth of the generation queue.")
    rule_generation_command_timeout_seconds: int = _generation("300", _integer(1),
        "Wall-clock limit of one "
        "router's generation.")
    rule_generation_interval_seconds: int = _generation(str(24 * 3600), _integer(1),
        "How often each registered "
        "router is revisited.")
    rule_generation_enabled: bool = _generation("true", _boolean,
        "Whether this server process runs the "
        "generation queue (false: it only serves the API; another process generates).")
    rule_generation_telemetry_days: int = _generation("7", _integer(1),
        "Days of a router's telemetry that shape "
        "its rules (fired sids, flow protocols and ports, alert sources).")
    rule_generation_block_severity: int = _generation("2", _integer(1, 255),
        "Alerts of this Suricata severity or more "
        "severe (1 is the highest) put their external endpoint on the router's firewall "
        "block list.")
    rule_generation_block_min_alerts: int = _generation("3", _integer(1),
        "Alerts an address needs (from at least "
        "two signatures or two flows) before the router's firewall blocks it for them; one "
        "spoofed packet never blocks anything.")
    rule_generation_fired_percent: int = _generation("50", _integer(0, 100),
        "Most of RULE_GENERATION_SAMPLE_COUNT, in "
        "percent, that rules kept because they fired for the router may take (most severe "
        "and most alerted first); the rest is sampled.")
    rule_generation_fleet_percent: int = _generation("10", _integer(0, 100),
        "Most of RULE_GENERATION_SAMPLE_COUNT, in "
        "percent, that rules kept because they fire across the fleet (outbreaks) may take, "
        "after the router's own fired rules.")
    rule_generation_firewall_max_entries: int = _generation("10000", _integer(1),
        "Most block entries in one "
        "firewall payload.")
    rule_generation_rules_filename: str = _generation("{mac}.rules.gz", _text,
        "Name of each router's rule "
        "file in RULE_DATA_DIR/idps_rules/ ({mac} is the MAC with dashes). A name ending "
        "in `.gz` is written gzip-compressed (about 53 KB instead of 315 KB per router; "
        "read it with zcat); any other name, as plain text.")
    rule_generation_poll_seconds: int = _generation("5", _integer(1),
        "How often an idle generation queue looks for "
        "due routers.")
    job_retry_delay_seconds: int = _generation("600", _integer(1),
        "Wait before a failed scheduled job is tried "
        "again.")
    job_retry_attempts: int = _generation("3", _integer(0),
        "Retries of a failed scheduled job within one tick.")
    # Notifications
    notification_api_token: str = _notifications("", _secret(16),
        "When set (at least 16 characters, as every token), "
        "every notification API call needs `Authorization: Bearer <token>`.")
    smtp_host: str | None = _notifications("", _optional_text,
        "SMTP server for notification email. Unset: messages are written "
        "as .eml files to NOTIFICATION_OUTBOX_DIR.")
    smtp_port: int = _notifications("587", _integer(1, 65535),
        "SMTP port.")
    smtp_security: str = _notifications("starttls", _choice("starttls", "tls", "none"),
        "`starttls`, `tls` (implicit TLS, usually port 465) "
        "or `none`.")
    smtp_username: str = _notifications("", _text,
        "SMTP login (none when empty).")
    smtp_password: str = _notifications("", _text,
        "SMTP password.")
    smtp_from: str = _notifications("IDS notifications <notifications@localhost>", _text,
        "From address of "
        "notification email.")
    smtp_timeout_seconds: int = _notifications("15", _integer(1),
        "Longest wait for the SMTP server per delivery.")
    notification_outbox_dir: Path | None = _notifications("", _optional_path,
        "Where .eml files go when SMTP_HOST is unset. "
        "Unset: DATA_DIR/outbox.")
    notification_retry_seconds: int = _notifications("60", _integer(1),
        "First wait before a failed delivery is tried "
        "again; doubles per attempt, at most an hour.")
    notification_max_attempts: int = _notifications("10", _integer(1),
        "Deliveries tried before a notification stays "
        "`failed` for good.")
    notification_idempotency_hours: int = _notifications("24", _integer(1),
        "How long the answer to a send with an "
        "`Idempotency-Key` is kept: a repeat within this time gets the same answer and "
        "sends nothing.")
    weekly_reports_cron_schedule: str = _notifications("5 * * * *", _cron_or_off,
        "Cron spec of the job sending each router "
        "owner's weekly report at the weekday and hour they chose (default Monday 08:00 "
        "UTC; docs/notification-api.md); `off`: none is sent unless an operator runs "
        "`router-backend reports weekly`.")
    # Retention and partitions
    data_retention_enabled: bool = _retention("false", _boolean,
        "true enables scheduled deletion of old "
        "telemetry. Default false: nothing is deleted unless an operator asks.")
    retention_days: int = _retention("30", _integer(1),
        "Days of telemetry records kept. Their hourly "
        "summaries are kept as far back as generation, the fleet job and the console read "
        "them (RULE_GENERATION_TELEMETRY_DAYS, FLEET_WINDOW_HOURS, a week: the longest) and "
        "an hour more, the alerts' packed by day 31 days (owners are shown 30), at most "
        "this long.")
    activation_retention_days: int = _retention("400", _integer(1),
        "Days of activation records kept by the "
        "retention job (long enough for monthly and yearly access reports); after their "
        "UTC day they are kept rolled up, one row per router, day and address.")
    hunt_retention_days: int = _retention("400", _integer(1),
        "Days the hunt index (which routers saw which "
        "address, domain, TLS fingerprint, signature or file, per day) is kept by the "
        "retention job: longer than the records themselves (RETENTION_DAYS), so a hunt "
        "still names routers and days after the records are gone (docs/security.md).")
    hunt_postings_per_router_day: int = _retention("20000", _integer(100),
        "New postings a router may add to the "
        "hunt index in a UTC day (a household's day is a few hundred: the corpus's "
        "sensor day 79), counted across processes and restarts: past it, its records "
        "are still stored and nothing more of that day is indexed (the postings it "
        "made stay); its records not indexed are counted per router and shown by "
        "`status` and the console (docs/security.md). Routers that do not count for the "
        "fleet yet (FLEET_MIN_ROUTER_AGE_HOURS) share one such budget per network their "
        "uploads came from.")
    hunt_index_seconds: int = _retention("5", _integer(1, 3600),
        "How often the hunt indexer (in the process that "
        "runs the jobs) writes the postings of the uploads acknowledged since its last "
        "turn, from their stored chunks: a record can be hunted this long after its "
        "upload is acknowledged, plus the turn's own time (a hunt first indexes what "
        "is pending, so it sees every upload acknowledged before it).")
    hunt_index_lanes: int = _retention("4", _integer(1, 64),
        "Lanes of the hunt indexer: the routers "
        "are split among them by their MAC's hash, and each lane indexes its routers' "
        "uploads on a database connection of its own, at the same time as the others "
        "(each lane one connection more for the process that runs the jobs). More "
        "lanes keep up with more small uploads (bench/README.md).")
    hunt_compact_cron_schedule: str = _retention("15 * * * *", _cron,
        "Cron spec of the job packing the "
        "hunt index's past days into compressed blocks (a few bytes a posting instead "
        "of about 140; `router-backend hunt compact` does the same at once): a day is "
        "packed at the first run after it ends.")
    retention_cron_schedule: str = _retention("0 0 * * 0", _cron,
        "Cron spec of the retention job.")
    telemetry_partition_days: int = _retention("1", _integer(1, 366),
        "Days of telemetry and activations per partition "
        "(by receive or activation time, UTC). Retention drops whole partitions; a change "
        "applies to partitions created from then on.")
    # Telemetry at rest
    telemetry_chunk_records: int = _at_rest("1000", _integer(2, 100_000),
        "Records per chunk written by the compaction "
        "job, which merges each router's small chunks (its uploads) into chunks of this "
        "many; larger ones compress better and are rewritten longer.")
    telemetry_compact_cron_schedule: str = _at_rest("*/10 * * * *", _cron,
        "Cron spec of the telemetry "
        "compaction job.")
    telemetry_compact_settle_seconds: int = _at_rest("300", _integer(0),
        "Age of a chunk before the compaction "
        "job takes it.")
    # Console
    console: bool = _console("true", _boolean,
        "Serve the console for support and operators under /console/ "
        "(docs/console.md). false: not served at all.")
    console_users: tuple[tuple[str, str, str], ...] = _console("", _console_users,
        "Who may sign in to the console: NAME:ROLE:HASH entries "
        "separated by commas, ROLE `support` (reads) or `operator` (reads and changes "
        "overrides, the allowlist and enrollments), HASH as `router-backend console "
        "credential NAME ROLE` prints it (scrypt of a secret of at least 16 characters). "
        "Empty: nobody can sign in.")
    console_secret: str = _console("", _secret(32),
        "Keys the hash under which console session ids are stored "
        "(at least 32 random characters, the same in every process and host); needed "
        "when CONSOLE_USERS is set. Changing it signs everybody out.")
    console_session_minutes: int = _console("480", _integer(1, 7 * 24 * 60),
        "How long a console sign-in lasts.")
    console_listen: tuple[str, int] | None = _console("", _listener,
        "HOST:PORT of a listener of the console's own (for example "
        "127.0.0.1:8081, or a private address): the console is then answered there only, "
        "not on LISTEN_HOST:LISTEN_PORT where routers call. Empty: the console shares the "
        "routers' listener.")
    # Fleet defence
    fleet_enabled: bool = _fleet("true", _boolean,
        "Run the `fleet` job: the external addresses that alerted "
        "at routers of FLEET_MIN_NETWORKS networks are served to every router (GET "
        "/rules/fleet), and the signatures that fired at as many are kept in every IDS "
        "payload (docs/rules.md, \"The fleet\").")
    fleet_cron_schedule: str = _fleet("*/5 * * * *", _cron,
        "Cron spec of the fleet job.")
    fleet_window_hours: int = _fleet("24", _integer(1, 24 * 30),
        "Hours of alerts the fleet job counts; an entry "
        "expires this long after the last hour it was reported in. A day's alert summaries "
        "are packed once this window no longer reaches it: raised later, the window finds "
        "the packed days no more (docs/telemetry.md).")
    fleet_min_networks: int = _fleet("5", _integer(2),
        "Distinct reporter networks an address or a signature "
        "needs to be listed for the fleet: each alert counts for the network its upload "
        "came from (an IPv4 /24, an IPv6 /48, at most 3 of one IPv6 /32), each router "
        "for one network, so routers behind one network count once.")
    fleet_min_router_age_hours: int = _fleet("72", _integer(0),
        "Routers registered, or given their current "
        "key, more recently do not count toward the fleet's lists (nor, in key mode, "
        "routers without a key).")
    fleet_max_per_router: int = _fleet("1000", _integer(1),
        "Most alert summary rows (address, signature, "
        "hour) one router counts for in the fleet's window: its most alerted; the rest "
        "are counted in the job's result, not listed, so one router's flood cannot grow "
        "the job.")
    fleet_attackers_in_mac_mode: bool = _fleet("false", _boolean,
        "With ROUTER_AUTH=mac, whoever knows a "
        "MAC uploads as that router, so the fleet's attackers list is empty unless this "
        "is true (outbreaks are still counted): set it only on a network where every "
        "router is yours (docs/rules.md).")
    false_positive_networks: int = _fleet("5", _integer(2, 1000),
        "Reporter networks (a /24, or a /48 and at "
        "most 3 of one IPv6 /32) whose routers' owners marked a threat feed's value \"not "
        "an attack\" before it is held for an operator (`intel decisions`), as a value "
        "seen by too much of the fleet is; a signature so marked is listed as a candidate "
        "to disable (`router-backend feedback`). Only routers that count for the fleet "
        "(FLEET_MIN_ROUTER_AGE_HOURS, keyed) count.")
    false_positive_marks_per_router_day: int = _fleet("50", _integer(1, 10_000),
        "Marks \"not an attack\" an owner may "
        "make of one router in a day (each is an allowlist entry or an override of its "
        "own); past it, 429.")
    enforcement_entries_per_router_day: int = _fleet("300", _integer(0, 100_000),
        "Most block-list entries a router's "
        "enforcement reports (POST /rules/enforced) store for one day, over its lists: "
        "the first reported, each report's most matched first; past it a report's "
        "totals are still counted, its new entries not (docs/router-api.md).")
    fleet_max_entries: int = _fleet("10000", _integer(1),
        "Most addresses in the fleet's list (the most widely "
        "reported first).")
    service_addresses: frozenset[ipaddress.IPv4Network | ipaddress.IPv6Network] = _fleet(
        "", _networks,
        "Comma-separated addresses or networks at which routers "
        "reach this service (its public addresses): never listed by the fleet, like "
        "LISTEN_HOST and TRUSTED_PROXIES.")
    # Threat intelligence
    intel_fetch_cron_schedule: str = _intel("23 * * * *", _cron,
        "Cron spec of the job fetching every "
        "feed that has a URL (`router-backend intel add`), retro-hunting what a new "
        "version brings over HUNT_RETENTION_DAYS and telling the owners of the routers "
        "that saw it (docs/intel.md).")
    intel_match_cron_schedule: str = _intel("* * * * *", _cron,
        "Cron spec of the job matching the "
        "last two days of the hunt index against the current indicators, so that an "
        "upload is sighted within about a minute of its acknowledgement.")
    intel_retro_hunt_processes: int = _intel("4", _integer(1, 64),
        "Processes a retro-hunt reads the packed hunt "
        "index with, each a range of its days in the same snapshot and a database "
        "connection of its own, at most the machine's cores: a 100,000-indicator feed "
        "over 400 days is mostly reading (bench/README.md).")
    intel_feed_max_bytes: int = _intel("67108864", _integer(1024),
        "Most bytes of one feed, after decoding "
        "(gzip, zip): a bigger one is refused and the previous version kept.")
    intel_fetch_timeout_seconds: int = _intel("120", _integer(1, 3600),
        "Longest a feed's fetch may take, "
        "connecting to the last byte.")
    intel_max_entries: int = _intel("100000", _integer(1, 10_000_000),
        "Most indicators a router is sent (GET "
        "/rules/intel), the feed's highest confidence first, then the most recently "
        "seen: about 100-170 bytes of a router's memory each in Suricata's datasets.")
    intel_prevalence_max: float = _intel("0.01", _fraction,
        "A value more than this share of the fleet's "
        "routers saw in the last 7 days (and at least 10 of them) is held for an "
        "operator's review (`intel release` or `intel suppress`), not delivered: a "
        "feed's false positive would otherwise fire at every router at once.")

    chosen: frozenset[str] = frozenset()
    given: tuple[tuple[str, str], ...] = ()

    @property
    def embedded_database(self) -> bool:
        return self.db_host is None

    @property
    def outbox_path(self) -> Path:
        return self.notification_outbox_dir or self.data_dir / "outbox"

    @property
    def rule_data_path(self) -> Path:
        return self.rule_data_dir or self.data_dir / "ruledata"

    def replace(self, **changes: Any) -> "Settings":
        return dataclasses.replace(self, **changes)


SETTINGS: tuple[Setting, ...] = tuple(
    dataclasses.replace(field.metadata["setting"], name=field.name.upper())
    for field in dataclasses.fields(Settings) if "setting" in field.metadata)
SECTIONS: tuple[tuple[str, tuple[Setting, ...]], ...] = tuple(
    (title, tuple(s for s in SETTINGS if s.section == title))
    for title in dict.fromkeys(s.section for s in SETTINGS))


# Environment variables starting with one of these are taken as meant for the service (the
# first word of two or more settings; HTTP_ is left out, as HTTP_PROXY is everybody's).
_FIRST_WORDS = Counter(setting.name.split("_")[0] for setting in SETTINGS)
SERVICE_PREFIXES = tuple(sorted(f"{word}_" for word, settings in _FIRST_WORDS.items()
                                if settings > 1 and word != "HTTP"))
CLOSE_NAME_CUTOFF = 0.85  # difflib's ratio: RETENTON_DAYS to RETENTION_DAYS is 0.96


def unrecognised_settings(environ: Mapping[str, str] | None = None,
                          env_file: Path | None = Path(".env")) -> list[str]:
    """One warning for each name that looks meant for the service but names no setting (so
    is ignored): every name of the `.env` file, and each environment variable that starts with
    one of the service's prefixes or is close to a setting's name; each with the closest
    setting's name when there is one."""
    environ = os.environ if environ is None else environ
    known = [setting.name for setting in SETTINGS]
    candidates = {name: "the environment" for name in environ
                  if name.startswith(SERVICE_PREFIXES)
                  or difflib.get_close_matches(name, known, 1, CLOSE_NAME_CUTOFF)}
    if env_file is not None and env_file.is_file():
        candidates.update({name: str(env_file) for name in read_env_file(env_file)})
    warnings = []
    for name, source in sorted(candidates.items()):
        if name in known:
            continue
        closest = difflib.get_close_matches(name, known, 1, 0.6)
        hint = f"; did you mean {closest[0]}?" if closest else ""
        warnings.append(f"{name} (in {source}) is no setting of this service and is "
                        f"ignored{hint}")
    return warnings


def read_env_file(path: Path) -> dict[str, str]:
    """Parse a `.env` file as docker compose and systemd users write them: KEY=VALUE lines,
    `#` comment lines, a ` #` comment after an unquoted value, values in single or double
    quotes kept whole (a `#` inside them too), an `export ` prefix. Ours rather than
    python-dotenv's: on a line it cannot parse (an unterminated quote) dotenv prints a
    warning and drops the line, and takes `NAME` alone as unset, where a service must stop
    at start-up naming the file and line."""
    values: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise SettingsError(f"{path}:{number}: expected NAME=value")
        values[name.strip()] = _env_value(value.strip(), f"{path}:{number}")
    return values


def _env_value(text: str, where: str) -> str:
    if text[:1] in ("'", '"'):
        end = text.find(text[0], 1)
        rest = text[end + 1:].strip() if end > 0 else ""
        if end < 0 or (rest and not rest.startswith("#")):
            raise SettingsError(f"{where}: unterminated quote or text after the closing quote")
        return text[1:end]
    comment = re.search(r"\s#", text)
    return (text[:comment.start()] if comment else text).strip()


def load_settings(environ: Mapping[str, str] | None = None,
                  env_file: Path | None = Path(".env")) -> Settings:
    """Build the settings from the environment, over an optional `.env` file, over defaults."""
    environ = os.environ if environ is None else environ
    merged: dict[str, str] = {}
    if env_file is not None and env_file.is_file():
        merged.update(read_env_file(env_file))
    merged.update(environ)
    values = {}
    for setting in SETTINGS:
        raw = merged.get(setting.name, setting.default)
        try:
            values[setting.attribute] = setting.parse(raw)
        except ValueError as error:
            raise SettingsError(f"invalid {setting.name}: {error}") from None
    if values["console_users"] and not values["console_secret"]:
        raise SettingsError("invalid CONSOLE_SECRET: needed (at least 32 characters) when "
                            "CONSOLE_USERS is set")
    given = tuple((s.name, merged[s.name]) for s in SETTINGS if s.name in merged)
    return Settings(**values, chosen=frozenset(name for name, _ in given), given=given)


# Each process's own: where its database is and its data directory (a command on another
# host reaches the same database by other means), and secrets, never written anywhere.
_OWN_PREFIXES = ("DB_",)
_OWN_NAMES = frozenset({"DATA_DIR", "CONSOLE_USERS"})
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD")


def shared_with_commands(name: str) -> bool:
    """Whether a setting the service runs with is recorded for its commands to act with
    (server/db/service_settings.py): every one but the process's own and the secrets."""
    return not (name.startswith(_OWN_PREFIXES) or name in _OWN_NAMES
                or any(word in name for word in _SECRET_WORDS))


def with_service_settings(settings: "Settings", service: Mapping[str, str]
                          ) -> tuple["Settings", list[str]]:
    """A command's settings acting with the running service's (`service`: what it recorded
    at start): each setting the command did not give itself takes the service's value. Also
    the names the command gave otherwise than the service, each `NAME=here (service: there)`."""
    own = dict(settings.given)
    differing = [f"{name}={own[name]} (service: {value})" for name, value in service.items()
                 if name in own and own[name] != value and shared_with_commands(name)]
    adopted = {name: value for name, value in service.items() if shared_with_commands(name)}
    return load_settings({**adopted, **own}, env_file=None), differing
