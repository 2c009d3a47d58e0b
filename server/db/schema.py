"""SQLAlchemy Core tables, mirroring `migrations/` (checked by tests/test_schema.py)."""

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, CIDR, INET, JSONB, MACADDR, UUID

metadata = sa.MetaData(naming_convention={
    "ix": "%(table_name)s_%(column_0_name)s_idx",
    "pk": "%(table_name)s_pkey",
})


def _mac_and_id() -> list[sa.Column]:
    return [sa.Column("mac", MACADDR, nullable=False),
            sa.Column("id", sa.BigInteger, sa.Identity(always=True), nullable=False)]


def _time_key(time_column: str) -> sa.PrimaryKeyConstraint:
    """The key of a table partitioned by `time_column` (migration 0014): (mac, time, id),
    since a partitioned table's keys must hold its partition key."""
    return sa.PrimaryKeyConstraint("mac", time_column, "id")


routers = sa.Table(
    "routers", metadata,
    sa.Column("mac", MACADDR, primary_key=True),
    sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("registered_by", sa.Text, nullable=False, server_default="auto"),
    sa.Column("note", sa.Text),
    sa.Column("registered_from", sa.Text),   # the client address bucket (issue 27)
)

router_keys = sa.Table(
    "router_keys", metadata,
    sa.Column("mac", MACADDR, sa.ForeignKey("routers.mac", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("key_hash", sa.LargeBinary, nullable=False),
    sa.Column("issued_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("issued_by", sa.Text, nullable=False),
)

enrollment_windows = sa.Table(
    "enrollment_windows", metadata,
    sa.Column("mac", MACADDR, sa.ForeignKey("routers.mac", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("open_until", sa.DateTime(timezone=True), nullable=False),
)

upload_keys = sa.Table(
    "upload_keys", metadata,
    sa.Column("mac", MACADDR, sa.ForeignKey("routers.mac", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("fingerprint", sa.LargeBinary, nullable=False),
    sa.Column("answer", JSONB, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Index("upload_keys_created_at_idx", "created_at"),
)

# Telemetry at rest (migration 0018, server/telemetry/).
telemetry_chunks = sa.Table(
    "telemetry_chunks", metadata,
    sa.Column("mac", MACADDR, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), nullable=False),
    sa.Column("first_received_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("records", sa.Integer, nullable=False),
    sa.Column("upload_times", ARRAY(sa.DateTime(timezone=True)), nullable=False),
    sa.Column("upload_records", ARRAY(sa.Integer), nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.PrimaryKeyConstraint("mac", "kind", "received_at", "id"),
)

telemetry_alerts = sa.Table(
    "telemetry_alerts", metadata,
    sa.Column("mac", MACADDR, nullable=False),
    sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
    sa.Column("src_ip", INET),
    sa.Column("dest_ip", INET),
    sa.Column("signature_id", sa.BigInteger, nullable=False),
    sa.Column("severity", sa.SmallInteger),
    sa.Column("alerts", sa.Integer, nullable=False),
    sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
    sa.Column("flow_ids", ARRAY(sa.Text), nullable=False),
)

telemetry_flows = sa.Table(
    "telemetry_flows", metadata,
    sa.Column("mac", MACADDR, nullable=False),
    sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
    sa.Column("app_proto", sa.Text),
    sa.Column("dest_port", sa.Integer),
    sa.Column("flows", sa.Integer, nullable=False),
)

activations = sa.Table(
    "activations", metadata,
    *_mac_and_id(),
    sa.Column("activated_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("address", INET),
    _time_key("activated_at"),
)

# Activations rolled up by UTC day (migration 0019, server/db/activation_days.py).
activation_days = sa.Table(
    "activation_days", metadata,
    sa.Column("mac", MACADDR, nullable=False),
    sa.Column("day", sa.DateTime(timezone=True), nullable=False),
    sa.Column("address", INET),
    sa.Column("activations", sa.Integer, nullable=False),
    sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
    sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
)

activation_rollup = sa.Table(
    "activation_rollup", metadata,
    sa.Column("single", sa.Boolean, primary_key=True, server_default=sa.true()),
    sa.Column("detail_from", sa.DateTime(timezone=True), nullable=False),
)

firewall_allowlist = sa.Table(
    "firewall_allowlist", metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("network", CIDR, nullable=False),
    sa.Column("mac", MACADDR, sa.ForeignKey("routers.mac", ondelete="CASCADE")),
    sa.Column("note", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
)

# Payloads are gzip-compressed canonical JSON (see engine/payloads.py, migration 0004).
router_rules = sa.Table(
    "router_rules", metadata,
    sa.Column("mac", MACADDR, primary_key=True),
    sa.Column("ids_etag", sa.Text),
    sa.Column("ids_updated_at", sa.DateTime(timezone=True)),
    sa.Column("firewall_etag", sa.Text),
    sa.Column("firewall_updated_at", sa.DateTime(timezone=True)),
    sa.Column("ids_payload_gz", sa.LargeBinary),
    sa.Column("firewall_payload_gz", sa.LargeBinary),
)

generation_queue = sa.Table(
    "generation_queue", metadata,
    sa.Column("mac", MACADDR, primary_key=True),
    sa.Column("next_due_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("generated_at", sa.DateTime(timezone=True)),
    sa.Column("generation_count", sa.Integer, nullable=False, server_default="0"),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_error", sa.Text),
    sa.Column("last_seconds", sa.REAL),
    sa.Column("claimed_by", sa.Text),
    sa.Column("claimed_until", sa.DateTime(timezone=True)),
)

job_runs = sa.Table(
    "job_runs", metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("job", sa.Text, nullable=False),
    sa.Column("started_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("finished_at", sa.DateTime(timezone=True)),
    sa.Column("status", sa.Text, nullable=False, server_default="running"),
    sa.Column("detail", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("error", sa.Text),
)

job_ticks = sa.Table(
    "job_ticks", metadata,
    sa.Column("job", sa.Text, primary_key=True),
    sa.Column("tick", sa.DateTime(timezone=True), primary_key=True),
    sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("claimed_by", sa.Text, nullable=False),
)

notifications = sa.Table(
    "notifications", metadata,
    sa.Column("id", UUID, primary_key=True),
    sa.Column("user_id", sa.Text, nullable=False),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("channel", sa.Text, nullable=False, server_default="email"),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("message", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False, server_default="pending"),
    sa.Column("read", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("recipient", sa.Text, nullable=False),
    sa.Column("metadata", JSONB, nullable=False, server_default=sa.text("'{}'::jsonb")),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("sent_at", sa.DateTime(timezone=True)),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("next_attempt_at", sa.DateTime(timezone=True)),
    sa.Column("last_error", sa.Text),
    sa.Column("claimed_by", sa.Text),  # the retry loop's process, while it holds a claim
)

rule_overrides = sa.Table(
    "rule_overrides", metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("selector", sa.Text, nullable=False),
    sa.Column("mac", MACADDR, sa.ForeignKey("routers.mac", ondelete="CASCADE")),
    sa.Column("note", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
)

router_applied = sa.Table(
    "router_applied", metadata,
    sa.Column("mac", MACADDR, sa.ForeignKey("routers.mac", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("ids_etag", sa.Text),
    sa.Column("firewall_etag", sa.Text),
    sa.Column("ok", sa.Boolean, nullable=False),
    sa.Column("detail", sa.Text),
    sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
)

telemetry_minutes = sa.Table(
    "telemetry_minutes", metadata,
    sa.Column("minute", sa.DateTime(timezone=True), primary_key=True),
    sa.Column("kind", sa.Text, primary_key=True),
    sa.Column("accepted", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("rejected", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("uploads", sa.BigInteger, nullable=False, server_default="0"),
)

poll_minutes = sa.Table(
    "poll_minutes", metadata,
    sa.Column("minute", sa.DateTime(timezone=True), primary_key=True),
    sa.Column("polls", sa.BigInteger, nullable=False),
)

notification_keys = sa.Table(
    "notification_keys", metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("fingerprint", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=False),
    sa.Column("notification_id", UUID),
    sa.Column("status", sa.SmallInteger),
    sa.Column("response", JSONB),
)

notification_deliveries = sa.Table(
    "notification_deliveries", metadata,
    sa.Column("notification_id", UUID, sa.ForeignKey("notifications.id", ondelete="CASCADE"),
              primary_key=True),
    sa.Column("attempt", sa.Integer, primary_key=True),
    sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("error", sa.Text),
)


# Operators' changes by hand, from the console or the commands (migration 0020).
tuning_changes = sa.Table(
    "tuning_changes", metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(always=True), primary_key=True),
    sa.Column("made_at", sa.DateTime(timezone=True), nullable=False,
              server_default=sa.func.now()),
    sa.Column("made_by", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
    sa.Column("mac", MACADDR),
    sa.Index("tuning_changes_mac_idx", "mac", "id"),
)
