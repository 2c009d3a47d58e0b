"""Service settings: one declarative table, one immutable object built at start-up.

Every setting is declared once, as a row of ``SECTIONS`` (environment name, default, help,
parser, under its section's heading); the rows make ``SETTINGS``, the fields of the
``Settings`` object, ``load_settings``, the tables of docs/settings.md, the example
environment file and ``tests/test_settings.py``.
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


def _workers(value: str) -> int:
    if value.strip().lower() == "auto":
        return os.cpu_count() or 1
    return _integer(1, 256)(value)


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

# Every setting, under the sections of its documentation (docs/settings.md, the example
# environment file), in order. Names the product's original specification gave (RULE_*,
# RETENTION_*) are kept as they are.
SECTIONS: tuple[tuple[str, tuple[Setting, ...]], ...] = (
    ("Server and processes", (
        Setting("LISTEN_HOST", "127.0.0.1", "Address the HTTP server listens on.", _text),
        Setting("LISTEN_PORT", "8080", "TCP port the HTTP server listens on.", _integer(1, 65535)),
        Setting("HTTP_WORKERS", "auto", "HTTP worker processes under one supervising process, "
                "which listens on the address for them (a socket per worker, kept when one "
                "dies) and also runs the one generation queue, the scheduled jobs and the "
                "notification retries of the host in a background process. `auto`: one per CPU core. 1: a single process does "
                "everything. `router-backend serve --workers N` overrides it.", _workers),
        Setting("SHUTDOWN_GRACE_SECONDS", "30", "On SIGTERM, how long requests and generations in "
                "progress may take to finish (new connections are refused meanwhile) before the "
                "process exits anyway.", _integer(0)),
        Setting("HTTP_IDLE_TIMEOUT_SECONDS", "15", "Longest wait for a complete request head, from "
                "connecting or from the previous response: a connection that sends its headers "
                "slower than this, or sits idle this long, is closed.", _integer(1)),
        Setting("DATA_DIR", "./var", "Directory for what the service keeps on local disk (the "
                "embedded database, the email outbox).", _path),
        Setting("SERVICES", "router,notifications", "Which APIs this process serves: `router`, "
                "`notifications`, or both (comma-separated).", _services),
        Setting("METRICS_TOKEN", "", "When set, GET /metrics also answers clients that send "
                "`Authorization: Bearer <token>` (a Prometheus on another host). Without it, only "
                "loopback clients that did not come through a proxy are answered.", _secret(16)),
        Setting("LOG_CONFIG", "", "A JSON file for Python's logging.config.dictConfig, applied at "
                "start instead of the default: INFO and up to stderr, access lines included, "
                "written in batches (docs/operations.md, Logs).", _log_config),
    )),
    ("Routers: registration, keys and limits", (
        Setting("REGISTRATION_MODE", "open", "`open`: a router is registered the first time it "
                "calls with a valid MAC. `closed`: only routers an operator subscribed may call "
                "(others get 403).", _choice("open", "closed")),
        Setting("ROUTER_CACHE_SECONDS", "30", "How long a server process trusts its memory of a "
                "router's registration (closed mode; open mode registers once) or of its key "
                "before asking the database again (a key rotated or revoked is forgotten at "
                "once, by notification; this bounds it while notifications are down).",
                _integer(0)),
        Setting("ROUTER_AUTH", "mac", "`mac`: a router is whoever sends its MAC in X-ID (the "
                "seed's behaviour). `key`: every router endpoint but /health also needs "
                "`Authorization: Bearer <router key>` (see docs/security.md).",
                _choice("mac", "key")),
        Setting("ENROLLMENT_TOKEN", "", "Fleet-wide secret (at least 16 characters) with which a "
                "router gets its key once from POST /enroll. Unset: enrollment is off and keys "
                "come only from `router-backend subscriptions add`.", _secret(16)),
        Setting("ENROLLMENT_RESET_WINDOW_MINUTES", "60", "After `router-backend subscriptions "
                "reset MAC`, how long that router may enroll again; later enrollment of it is 409 "
                "until the next reset.", _integer(1)),
        Setting("TRUSTED_PROXIES", "", "Comma-separated addresses or networks of the reverse "
                "proxies in front (Caddy): for their requests the client address is read from "
                "X-Forwarded-For. Empty (the default): the connection's address always, so no "
                "client, not even a local one, chooses the address its limits count against; "
                "the shipped deployments name their proxy (127.0.0.1/32,::1/128 for Caddy on "
                "the same host).", _networks),
        Setting("ROUTER_REQUESTS_PER_MINUTE", "120", "Requests one router may make per minute (a "
                "minute's worth at once, then this rate), per server process; beyond: 429 with "
                "Retry-After. /health and /enroll are not counted.", _integer(1)),
        Setting("ROUTER_RECORDS_PER_MINUTE", "100000", "Telemetry records one router may send per "
                "minute, per server process (so also the most one body may hold); the request that "
                "goes beyond is refused whole with 429.", _integer(1)),
        Setting("REGISTRATIONS_PER_MINUTE_PER_ADDRESS", "30", "New routers one client address may "
                "register (by a first call or an enrollment) per minute in open mode, counted in "
                "the database across every server process (429 beyond; routers already registered "
                "are not affected).", _integer(1)),
        Setting("FAILED_CREDENTIALS_PER_MINUTE_PER_ADDRESS", "10", "Wrong router keys and "
                "enrollment tokens one client address may present per minute, per server process; "
                "beyond, its requests without a key this process already trusts get 429 with "
                "Retry-After until the allowance refills.", _integer(1)),
        Setting("IPV6_LIMIT_PREFIX", "64", "Per-address limits count IPv6 clients per network of "
                "this prefix length (a subscriber's /64), not per address.", _integer(1, 128)),
    )),
    ("Database", (
        Setting("DB_HOST", "", "PostgreSQL host name or socket directory. Unset: the service "
                "starts its own embedded PostgreSQL in DATA_DIR/postgres.", _optional_text),
        Setting("DB_PORT", "5432", "PostgreSQL port.", _integer(1, 65535)),
        Setting("DB_WAL_ARCHIVE_DIR", "", "Embedded PostgreSQL only: a directory (best on another "
                "disk) where the server archives every WAL segment, at least once a minute, for "
                "point-in-time recovery from a `router-backend backup --base` "
                "(docs/operations.md). Empty: no archiving.", _optional_path),
        Setting("DB_NAME", "router_backend", "Database name; created when it does not exist.",
                _text),
        Setting("DB_USER", "postgres", "Database user.", _text),
        Setting("DB_PASSWORD", "", "Database password.", _text),
        Setting("DB_SSLMODE", "prefer", "libpq sslmode (disable, allow, prefer, require, "
                "verify-ca, verify-full).",
                _choice("disable", "allow", "prefer", "require", "verify-ca", "verify-full")),
        Setting("DB_LOG_LEVEL", "warning", "Database logging: silent, error, warning or info (info "
                "logs every statement).", _choice("silent", "error", "warning", "info")),
        Setting("DB_POOL_MIN", "1", "Connections each server process keeps open.", _integer(0)),
        Setting("DB_POOL_MAX", "20", "Most connections one server process opens.", _integer(1)),
        Setting("INGEST_DB_POOL_MAX", "10", "Most connections telemetry uploads hold at once, from "
                "a pool of their own beside DB_POOL_MAX's, so uploads (even stalled ones) never "
                "take the connections that polls, health checks and generation need; further "
                "uploads wait up to DB_TIMEOUT_SECONDS, then get 503.", _integer(1)),
        Setting("DB_TIMEOUT_SECONDS", "30", "Longest wait for a connection or one statement before "
                "the request fails with 503; a statement that outlasts it is cancelled on the "
                "server first (up to 10 s more when the server does not answer).",
                _integer(1)),
        Setting("DB_RETRY_AFTER_SECONDS", "5", "Retry-After sent with 503 when the database is "
                "unreachable.", _integer(1)),
    )),
    ("Telemetry ingestion", (
        Setting("INGEST_MAX_BODY_BYTES", str(256 * 1024 * 1024), "Largest telemetry body accepted, "
                "counted after gzip decoding (413 beyond).", _integer(1)),
        Setting("INGEST_MAX_RECORD_BYTES", str(1024 * 1024), "Largest single record; longer ones "
                "are rejected and reported, the rest of the body goes on.", _integer(64)),
        Setting("INGEST_BATCH_ROWS", "2000", "Most records per chunk (one row) written while a "
                "body streams in.", _integer(1)),
        Setting("INGEST_BODY_IDLE_SECONDS", "15", "Longest pause between two pieces of a telemetry "
                "body: a body that stalls longer is answered 408, its transaction rolled back and "
                "its connection closed.", _integer(1)),
        Setting("INGEST_MAX_GZIP_RATIO", "200", "Largest decoded-to-received size ratio of a gzip "
                "body (the first 64 KiB decoded are free); beyond it the body is refused with 413 "
                "as it arrives. Real EVE output compresses 10-25 times.", _integer(1)),
        Setting("INGEST_MAX_UPLOADS_PER_ROUTER", "2", "Telemetry uploads one router may have in "
                "progress at once in one server process; more are answered 429 with Retry-After "
                "(an agent uploads one body at a time).", _integer(1)),
        Setting("INGEST_MAX_UPLOADS_PER_ADDRESS", "8", "Telemetry uploads one client address (an "
                "IPv6 /IPV6_LIMIT_PREFIX network) may have in progress at once in one server "
                "process, whatever its MACs; more are answered 429 with Retry-After. Keep it below "
                "INGEST_DB_POOL_MAX, so one client's stalled uploads cannot hold every ingestion "
                "connection; raise it for many routers behind one carrier-grade NAT address.",
                _integer(1)),
        Setting("INGEST_MAX_REPORTED_ERRORS", "100", "Most per-record errors listed in one "
                "response (the rejected count is always exact).", _integer(0)),
        Setting("INGEST_IDEMPOTENCY_KEY_DAYS", "7", "How long a telemetry upload's Idempotency-Key "
                "is kept, so that a retry is answered from it instead of storing again: longer "
                "than any agent keeps a batch spooled. Expired keys are deleted by the hourly "
                "`upload-keys` job.", _integer(1)),
    )),
    ("Rule data and generation", (
        Setting("RULE_DATA_DIR", "", "Working directory for rule data (rules/, rulefile_json/, "
                "idps_rules/). Unset: DATA_DIR/ruledata.", _optional_path),
        Setting("RULE_PREPROCESS_ARCHIVE_URL", f"{ET_OPEN_BASE}/emerging.rules.tar.gz", "Download "
                "URL of the open rule archive (zip or tar.gz).", _text),
        Setting("RULE_PREPROCESS_VERSION_URL", f"{ET_OPEN_BASE}/version.txt", "Version stamp of "
                "the rule archive.", _text),
        Setting("RULE_PREPROCESS_CRON_SCHEDULE", "0 0 * * 0", "Cron spec of the preprocess job.",
                _cron),
        Setting("RULE_PREPROCESS_AT_START", "true", "When no ruleset was ever published, run the "
                "preprocess job soon after start-up (once across processes, retried with backoff "
                "up to JOB_RETRY_DELAY_SECONDS while it fails) instead of waiting for its first "
                "cron tick.", _boolean),
        Setting("RULE_GENERATION_SAMPLE_COUNT", "550", "IDS rules sampled per router.",
                _integer(1)),
        Setting("RULE_GENERATION_MAX_CONCURRENT", "1", "Worker processes of the generation queue.",
                _integer(1)),
        Setting("RULE_GENERATION_QUEUE_CAPACITY", "64", "Buffered depth of the generation queue.",
                _integer(1)),
        Setting("RULE_GENERATION_COMMAND_TIMEOUT_SECONDS", "300", "Wall-clock limit of one "
                "router's generation.", _integer(1)),
        Setting("RULE_GENERATION_INTERVAL_SECONDS", str(24 * 3600), "How often each registered "
                "router is revisited.", _integer(1)),
        Setting("RULE_GENERATION_ENABLED", "true", "Whether this server process runs the "
                "generation queue (false: it only serves the API; another process generates).",
                _boolean),
        Setting("RULE_GENERATION_TELEMETRY_DAYS", "7", "Days of a router's telemetry that shape "
                "its rules (fired sids, flow protocols and ports, alert sources).", _integer(1)),
        Setting("RULE_GENERATION_BLOCK_SEVERITY", "2", "Alerts of this Suricata severity or more "
                "severe (1 is the highest) put their external endpoint on the router's firewall "
                "block list.", _integer(1, 255)),
        Setting("RULE_GENERATION_BLOCK_MIN_ALERTS", "3", "Alerts an address needs (from at least "
                "two signatures or two flows) before the router's firewall blocks it for them; one "
                "spoofed packet never blocks anything.", _integer(1)),
        Setting("RULE_GENERATION_FIRED_PERCENT", "50", "Most of RULE_GENERATION_SAMPLE_COUNT, in "
                "percent, that rules kept because they fired for the router may take (most severe "
                "and most alerted first); the rest is sampled.", _integer(0, 100)),
        Setting("RULE_GENERATION_FLEET_PERCENT", "10", "Most of RULE_GENERATION_SAMPLE_COUNT, in "
                "percent, that rules kept because they fire across the fleet (outbreaks) may take, "
                "after the router's own fired rules.", _integer(0, 100)),
        Setting("RULE_GENERATION_FIREWALL_MAX_ENTRIES", "10000", "Most block entries in one "
                "firewall payload.", _integer(1)),
        Setting("RULE_GENERATION_RULES_FILENAME", "{mac}.rules.gz", "Name of each router's rule "
                "file in RULE_DATA_DIR/idps_rules/ ({mac} is the MAC with dashes). A name ending "
                "in `.gz` is written gzip-compressed (about 53 KB instead of 315 KB per router; "
                "read it with zcat); any other name, as plain text.", _text),
        Setting("RULE_GENERATION_POLL_SECONDS", "5", "How often an idle generation queue looks for "
                "due routers.", _integer(1)),
        Setting("JOB_RETRY_DELAY_SECONDS", "600", "Wait before a failed scheduled job is tried "
                "again.", _integer(1)),
        Setting("JOB_RETRY_ATTEMPTS", "3", "Retries of a failed scheduled job within one tick.",
                _integer(0)),
    )),
    ("Notifications", (
        Setting("NOTIFICATION_API_TOKEN", "", "When set (at least 16 characters, as every token), "
                "every notification API call needs `Authorization: Bearer <token>`.", _secret(16)),
        Setting("SMTP_HOST", "", "SMTP server for notification email. Unset: messages are written "
                "as .eml files to NOTIFICATION_OUTBOX_DIR.", _optional_text),
        Setting("SMTP_PORT", "587", "SMTP port.", _integer(1, 65535)),
        Setting("SMTP_SECURITY", "starttls", "`starttls`, `tls` (implicit TLS, usually port 465) "
                "or `none`.", _choice("starttls", "tls", "none")),
        Setting("SMTP_USERNAME", "", "SMTP login (none when empty).", _text),
        Setting("SMTP_PASSWORD", "", "SMTP password.", _text),
        Setting("SMTP_FROM", "IDS notifications <notifications@localhost>", "From address of "
                "notification email.", _text),
        Setting("SMTP_TIMEOUT_SECONDS", "15", "Longest wait for the SMTP server per delivery.",
                _integer(1)),
        Setting("NOTIFICATION_OUTBOX_DIR", "", "Where .eml files go when SMTP_HOST is unset. "
                "Unset: DATA_DIR/outbox.", _optional_path),
        Setting("NOTIFICATION_RETRY_SECONDS", "60", "First wait before a failed delivery is tried "
                "again; doubles per attempt, at most an hour.", _integer(1)),
        Setting("NOTIFICATION_MAX_ATTEMPTS", "10", "Deliveries tried before a notification stays "
                "`failed` for good.", _integer(1)),
        Setting("NOTIFICATION_IDEMPOTENCY_HOURS", "24", "How long the answer to a send with an "
                "`Idempotency-Key` is kept: a repeat within this time gets the same answer and "
                "sends nothing.", _integer(1)),
    )),
    ("Retention and partitions", (
        Setting("DATA_RETENTION_ENABLED", "false", "true enables scheduled deletion of old "
                "telemetry. Default false: nothing is deleted unless an operator asks.", _boolean),
        Setting("RETENTION_DAYS", "30", "Days of telemetry kept.", _integer(1)),
        Setting("ACTIVATION_RETENTION_DAYS", "400", "Days of activation records kept by the "
                "retention job (long enough for monthly and yearly access reports); after 8 days "
                "they are kept rolled up, one row per router, day and address.", _integer(1)),
        Setting("HUNT_RETENTION_DAYS", "400", "Days the hunt index (which routers saw which "
                "address, domain, TLS fingerprint, signature or file, per day) is kept by the "
                "retention job: longer than the records themselves (RETENTION_DAYS), so a hunt "
                "still names routers and days after the records are gone (docs/security.md).",
                _integer(1)),
        Setting("HUNT_POSTINGS_PER_ROUTER_DAY", "20000", "New postings a router may add to the "
                "hunt index in a UTC day (a household's day is a few hundred: the corpus's "
                "sensor day 79), counted across processes and restarts: past it, its records "
                "are still stored, the values it had already posted that day are still "
                "updated, and the others are not indexed, counted per router and shown by "
                "`status` and the console (docs/security.md).", _integer(100)),
        Setting("HUNT_INDEX_SECONDS", "5", "How often the hunt indexer (in the process that "
                "runs the jobs) writes the postings of the uploads acknowledged since its last "
                "turn, from their stored chunks: a record can be hunted this long after its "
                "upload is acknowledged, plus the turn's own time (a hunt first indexes what "
                "is pending, so it sees every upload acknowledged before it).", _integer(1, 3600)),
        Setting("HUNT_COMPACT_CRON_SCHEDULE", "15 * * * *", "Cron spec of the job packing the "
                "hunt index's past days into compressed blocks (a few bytes a posting instead "
                "of about 140; `router-backend hunt compact` does the same at once): a day is "
                "packed at the first run after it ends.", _cron),
        Setting("RETENTION_CRON_SCHEDULE", "0 0 * * 0", "Cron spec of the retention job.", _cron),
        Setting("TELEMETRY_PARTITION_DAYS", "1", "Days of telemetry and activations per partition "
                "(by receive or activation time, UTC). Retention drops whole partitions; a change "
                "applies to partitions created from then on.", _integer(1, 366)),
    )),
    ("Telemetry at rest", (
        Setting("TELEMETRY_CHUNK_RECORDS", "1000", "Records per chunk written by the compaction "
                "job, which merges each router's small chunks (its uploads) into chunks of this "
                "many; larger ones compress better and are rewritten longer.",
                _integer(2, 100_000)),
        Setting("TELEMETRY_COMPACT_CRON_SCHEDULE", "*/10 * * * *", "Cron spec of the telemetry "
                "compaction job.", _cron),
        Setting("TELEMETRY_COMPACT_SETTLE_SECONDS", "300", "Age of a chunk before the compaction "
                "job takes it.", _integer(0)),
    )),
    ("Console", (
        Setting("CONSOLE", "true", "Serve the console for support and operators under /console/ "
                "(docs/console.md). false: not served at all.", _boolean),
        Setting("CONSOLE_USERS", "", "Who may sign in to the console: NAME:ROLE:HASH entries "
                "separated by commas, ROLE `support` (reads) or `operator` (reads and changes "
                "overrides, the allowlist and enrollments), HASH as `router-backend console "
                "credential NAME ROLE` prints it (scrypt of a secret of at least 16 characters). "
                "Empty: nobody can sign in.", _console_users),
        Setting("CONSOLE_SECRET", "", "Keys the hash under which console session ids are stored "
                "(at least 32 random characters, the same in every process and host); needed "
                "when CONSOLE_USERS is set. Changing it signs everybody out.", _secret(32)),
        Setting("CONSOLE_SESSION_MINUTES", "480", "How long a console sign-in lasts.",
                _integer(1, 7 * 24 * 60)),
        Setting("CONSOLE_LISTEN", "", "HOST:PORT of a listener of the console's own (for example "
                "127.0.0.1:8081, or a private address): the console is then answered there only, "
                "not on LISTEN_HOST:LISTEN_PORT where routers call. Empty: the console shares the "
                "routers' listener.", _listener),
    )),
    ("Fleet defence", (
        Setting("FLEET_ENABLED", "true", "Run the `fleet` job: the external addresses that alerted "
                "at routers of FLEET_MIN_NETWORKS networks are served to every router (GET "
                "/rules/fleet), and the signatures that fired at as many are kept in every IDS "
                "payload (docs/rules.md, \"The fleet\").", _boolean),
        Setting("FLEET_CRON_SCHEDULE", "*/5 * * * *", "Cron spec of the fleet job.", _cron),
        Setting("FLEET_WINDOW_HOURS", "24", "Hours of alerts the fleet job counts; an entry "
                "expires this long after the last hour it was reported in.", _integer(1, 24 * 30)),
        Setting("FLEET_MIN_NETWORKS", "5", "Distinct reporter networks an address or a signature "
                "needs to be listed for the fleet: each alert counts for the network its upload "
                "came from (an IPv4 /24, an IPv6 /48, at most 3 of one IPv6 /32), each router "
                "for one network, so routers behind one network count once.", _integer(2)),
        Setting("FLEET_MIN_ROUTER_AGE_HOURS", "72", "Routers registered, or given their current "
                "key, more recently do not count toward the fleet's lists (nor, in key mode, "
                "routers without a key).", _integer(0)),
        Setting("FLEET_MAX_PER_ROUTER", "1000", "Most alert summary rows (address, signature, "
                "hour) one router counts for in the fleet's window: its most alerted; the rest "
                "are counted in the job's result, not listed, so one router's flood cannot grow "
                "the job.", _integer(1)),
        Setting("FLEET_ATTACKERS_IN_MAC_MODE", "false", "With ROUTER_AUTH=mac, whoever knows a "
                "MAC uploads as that router, so the fleet's attackers list is empty unless this "
                "is true (outbreaks are still counted): set it only on a network where every "
                "router is yours (docs/rules.md).", _boolean),
        Setting("FLEET_MAX_ENTRIES", "10000", "Most addresses in the fleet's list (the most widely "
                "reported first).", _integer(1)),
        Setting("SERVICE_ADDRESSES", "", "Comma-separated addresses or networks at which routers "
                "reach this service (its public addresses): never listed by the fleet, like "
                "LISTEN_HOST and TRUSTED_PROXIES.", _networks),
    )),
    ("Threat intelligence", (
        Setting("INTEL_FETCH_CRON_SCHEDULE", "23 * * * *", "Cron spec of the job fetching every "
                "feed that has a URL (`router-backend intel add`), retro-hunting what a new "
                "version brings over HUNT_RETENTION_DAYS and telling the owners of the routers "
                "that saw it (docs/intel.md).", _cron),
        Setting("INTEL_MATCH_CRON_SCHEDULE", "* * * * *", "Cron spec of the job matching the "
                "last two days of the hunt index against the current indicators, so that an "
                "upload is sighted within about a minute of its acknowledgement.", _cron),
        Setting("INTEL_FEED_MAX_BYTES", "67108864", "Most bytes of one feed, after decoding "
                "(gzip, zip): a bigger one is refused and the previous version kept.",
                _integer(1024)),
        Setting("INTEL_FETCH_TIMEOUT_SECONDS", "120", "Longest a feed's fetch may take, "
                "connecting to the last byte.", _integer(1, 3600)),
        Setting("INTEL_MAX_ENTRIES", "100000", "Most indicators a router is sent (GET "
                "/rules/intel), the feed's highest confidence first, then the most recently "
                "seen: about 100-170 bytes of a router's memory each in Suricata's datasets.",
                _integer(1, 10_000_000)),
        Setting("INTEL_PREVALENCE_MAX", "0.01", "A value more than this share of the fleet's "
                "routers saw in the last 7 days (and at least 10 of them) is held for an "
                "operator's review (`intel release` or `intel suppress`), not delivered: a "
                "feed's false positive would otherwise fire at every router at once.",
                _fraction),
    )),
)

SETTINGS: tuple[Setting, ...] = tuple(dataclasses.replace(setting, section=section)
                                        for section, rows in SECTIONS for setting in rows)


class _Derived:
    """What the settings imply, beside the values of SETTINGS (the fields of `Settings`)."""

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


# One immutable field per setting, named as its variable in lower case and typed as its
# parser returns: a setting is declared once, by its row in SECTIONS. Beside them, `chosen`:
# the names given a value (the environment, the .env file) rather than left at their default,
# and `given`: those values as written, (name, text) pairs.
Settings = dataclasses.make_dataclass(
    "Settings", [(setting.attribute, setting.parse.__annotations__.get("return", Any))
                 for setting in SETTINGS]
    + [("chosen", frozenset, dataclasses.field(default=frozenset())),
       ("given", tuple, dataclasses.field(default=()))],
    bases=(_Derived,), frozen=True)
Settings.__module__ = __name__


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
