"""The notification API against a real SMTP server (aiosmtpd) and the real database:
sends, retries, the feed; idempotent sends, unread counts, mark all read and delivery
status (issue 17)."""

from __future__ import annotations

import asyncio
import email
import uuid
from datetime import timedelta

import pytest
from aiosmtpd.controller import Controller

from server.notify import key_sql as notification_keys
from server.notify import sql as notification_db
from server.db.lifecycle import open_database
from server.db.pool import DatabaseUnavailable
from server.notify.mailer import make_mailer
from server.notify.service import RETRY_BATCH, RETRY_LEASE, Delivery, Notifier
from testkit.database import settings_for
from testkit.server import free_port
from testkit.tcp_proxy import TcpProxy

SENDER = "IDS notifications <notify@example.test>"


class Inbox:
    """An aiosmtpd handler that keeps what it accepts, or refuses everything when told to."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], email.message.Message]] = []
        self.refuse = False

    async def handle_DATA(self, server, session, envelope):
        if self.refuse:
            return "550 5.7.1 mailbox unavailable"
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos),
                              email.message_from_bytes(envelope.content)))
        return "250 OK"


@pytest.fixture
def smtp():
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=free_port())
    controller.start()
    yield inbox, controller
    controller.stop()


def smtp_settings(database, tmp_path, port: int, **extra: str):
    return settings_for(database, tmp_path, SMTP_HOST="127.0.0.1", SMTP_PORT=str(port),
                        SMTP_SECURITY="none", SMTP_FROM=SENDER,
                        **{"SERVICES": "notifications", **extra})


@pytest.fixture
async def api(smtp, database, tmp_path, make_client):
    inbox, controller = smtp
    return await make_client(smtp_settings(database, tmp_path, controller.port)), inbox


SENDS = [
    ("vulsource-update", "vulsource_update", {"versionNumber": "2026.11.3"}, "version_number",
     "2026.11.3"),
    ("scan-failed", "scan_failed", {"projectId": "proj-42"}, "project_id", "proj-42"),
    ("scheduled-scan-finished", "scheduled_scan_finished", {"projectId": "proj-7"},
     "project_id", "proj-7"),
]


@pytest.mark.parametrize("path,type_,field,key,value", SENDS)
async def test_send_delivers_and_stores(api, sql, path, type_, field, key, value):
    client, inbox = api
    body = {"userId": "user-1", "recipient": "alice@example.org", **field}
    response = await client.post(f"/api/notifications/{path}", json=body)
    assert response.status == 200
    assert await response.json() == {"message": f"{type_} notification sent."}
    sender, recipients, message = inbox.messages[0]
    assert recipients == ["alice@example.org"] and sender == "notify@example.test"
    assert message["From"] == SENDER and message["To"] == "alice@example.org"
    assert value in message["Subject"] and value in message.get_payload()
    row = sql.rows("SELECT user_id, type, channel, status, read, recipient, metadata, "
                   "sent_at IS NOT NULL, title FROM notifications")[0]
    assert row[:8] == ("user-1", type_, "email", "sent", False, "alice@example.org",
                       {key: value}, True)
    assert row[8] == message["Subject"]


@pytest.mark.parametrize("body,expected", [
    ({"recipient": "a@example.org", "projectId": "p"}, "userId"),
    ({"userId": "u", "projectId": "p"}, "recipient"),
    ({"userId": "u", "recipient": "a@example.org"}, "projectId"),
    ({"userId": 7, "recipient": "a@example.org", "projectId": "p"}, "userId"),
    ({"userId": "u", "recipient": "not-an-email", "projectId": "p"}, "email address"),
    ({"userId": "u", "recipient": "a@b", "projectId": "p"}, "email address"),
    ({"userId": "u", "recipient": "a@example.org", "projectId": "p\r\nBcc: x@y.z"}, "control"),
    ({"userId": "  ", "recipient": "a@example.org", "projectId": "p"}, "userId"),
    (["not", "an", "object"], "JSON object"),
    # What an attacker or a broken caller sends (issue 13): separators that break headers,
    # bidi controls, and recipients that would mail someone else or several people.
    ({"userId": "u", "recipient": "a@example.org", "projectId": "1\u20282"}, "line separators"),
    ({"userId": "u", "recipient": "a@example.org", "projectId": "1\u2029"}, "line separators"),
    ({"userId": "u", "recipient": "a@example.org", "projectId": "a\x85b"}, "control"),
    ({"userId": "u\u202e", "recipient": "a@example.org", "projectId": "p"}, "control"),
    ({"userId": "u", "recipient": "evil,alice@example.org", "projectId": "p"}, "one email"),
    ({"userId": "u", "recipient": '"Bob"<bob>alice@example.org', "projectId": "p"}, "one email"),
    ({"userId": "u", "recipient": "Bob <bob@example.org>", "projectId": "p"}, "one email"),
    ({"userId": "u", "recipient": "bob@example.org (x)", "projectId": "p"}, "one email"),
    ({"userId": "u", "recipient": "<@relay:bob@example.org>", "projectId": "p"}, "one email"),
    ({"userId": "u", "recipient": "bob@[192.0.2.1]", "projectId": "p"}, "one email"),
])
async def test_send_validation_is_400_and_stores_nothing(api, sql, body, expected):
    client, inbox = api
    response = await client.post("/api/notifications/scan-failed", json=body)
    assert response.status == 400
    assert expected in (await response.json())["error"]
    assert sql.value("SELECT count(*) FROM notifications") == 0 and inbox.messages == []


async def test_invalid_json_is_400(api):
    client, _ = api
    response = await client.post("/api/notifications/scan-failed", data=b"{oops",
                                 headers={"Content-Type": "application/json"})
    assert response.status == 400 and "JSON" in (await response.json())["error"]


async def test_unknown_type_is_404_json(api):
    client, _ = api
    response = await client.post("/api/notifications/party-time", json={})
    assert response.status == 404 and "error" in await response.json()


async def store(db, user: str, type_: str, title: str,
                recipient: str) -> notification_db.NotificationRow:
    """A pending record stored directly, as a crash or another service would leave it."""
    return await notification_db.create(db, notification_db.new_notification(
        user, type_, title, "m", recipient, {}, timedelta(minutes=1)))


async def force_due(sql) -> None:
    sql.rows("UPDATE notifications SET next_attempt_at = now() - interval '1 second' "
             "WHERE status <> 'sent'")


async def retry_once(settings) -> int:
    async with open_database(settings) as db:
        return await Notifier(db, make_mailer(settings), Delivery.from_settings(settings)).retry_due()


async def test_refused_delivery_is_500_failed_then_retried(api, smtp, sql, database, tmp_path):
    client, inbox = api
    inbox.refuse = True
    body = {"userId": "u2", "recipient": "bob@example.org", "projectId": "p9"}
    response = await client.post("/api/notifications/scan-failed", json=body)
    assert response.status == 500
    assert "retried" in (await response.json())["error"]
    assert sql.rows("SELECT status, attempts, last_error LIKE '%%550%%' FROM notifications") == \
        [("failed", 1, True)]
    inbox.refuse = False
    await force_due(sql)
    settings = smtp_settings(database, tmp_path, smtp[1].port)
    assert await retry_once(settings) == 1
    assert sql.rows("SELECT status, sent_at IS NOT NULL FROM notifications") == [("sent", True)]
    assert inbox.messages[0][1] == ["bob@example.org"]


async def test_smtp_down_then_back(database, tmp_path, make_client, sql):
    port = free_port()  # nothing listens here yet
    settings = smtp_settings(database, tmp_path, port)
    client = await make_client(settings)
    body = {"userId": "u3", "recipient": "carol@example.org", "versionNumber": "9"}
    response = await client.post("/api/notifications/vulsource-update", json=body)
    assert response.status == 500
    assert sql.value("SELECT status FROM notifications") == "failed"
    inbox = Inbox()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        await force_due(sql)
        assert await retry_once(settings) == 1
    finally:
        controller.stop()
    assert sql.value("SELECT status FROM notifications") == "sent"
    assert len(inbox.messages) == 1


async def test_retries_stop_after_max_attempts(database, tmp_path, sql):
    settings = smtp_settings(database, tmp_path, free_port(), NOTIFICATION_MAX_ATTEMPTS="2")
    async with open_database(settings) as db:
        notifier = Notifier(db, make_mailer(settings), Delivery.from_settings(settings))
        record = await store(db, "u", "scan_failed", "t", "x@example.org")
        assert await notifier.deliver(record) is not None
        await force_due(sql)
        assert await notifier.retry_due() == 0
    assert sql.rows("SELECT status, attempts, next_attempt_at FROM notifications") == \
        [("failed", 2, None)]


async def test_pending_record_left_by_a_crash_is_delivered_later(smtp, database, tmp_path,
                                                                 sql):
    inbox, controller = smtp
    settings = smtp_settings(database, tmp_path, controller.port)
    async with open_database(settings) as db:  # stored, then the process "dies" undelivered
        await store(db, "u8", "scan_failed", "t", "fay@example.org")
    assert sql.value("SELECT next_attempt_at > now() FROM notifications") is True
    await force_due(sql)  # the grace period has passed
    assert await retry_once(settings) == 1
    assert sql.value("SELECT status FROM notifications") == "sent"
    assert inbox.messages[0][1] == ["fay@example.org"]


async def test_outbox_when_no_smtp_host(database, tmp_path, make_client):
    settings = settings_for(database, tmp_path, SERVICES="notifications")
    client = await make_client(settings)
    body = {"userId": "u4", "recipient": "dan@example.org", "projectId": "p1"}
    assert (await client.post("/api/notifications/scheduled-scan-finished", json=body)).status \
        == 200
    files = list((tmp_path / "outbox").glob("*.eml"))
    assert len(files) == 1
    message = email.message_from_bytes(files[0].read_bytes())
    assert message["To"] == "dan@example.org" and "p1" in message["Subject"]
    # Issue 27, finding 8: the messages were 0644, whatever the umask.
    assert files[0].stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "outbox").stat().st_mode & 0o077 == 0


async def test_mark_read(api, sql):
    client, _ = api
    body = {"userId": "u5", "recipient": "eve@example.org", "projectId": "p"}
    await client.post("/api/notifications/scan-failed", json=body)
    notification_id = sql.value("SELECT id::text FROM notifications")
    for _ in range(2):  # marking again returns it unchanged
        response = await client.put(f"/api/notifications/{notification_id}/read")
        assert response.status == 200
        reply = await response.json()
        assert reply["message"] and reply["notification"]["read"] is True
    record = reply["notification"]
    assert set(record) == {"id", "userId", "type", "channel", "title", "message", "status",
                           "read", "recipient", "metadata", "createdAt", "sentAt"}
    assert record["createdAt"].endswith("Z") and record["metadata"] == {"project_id": "p"}
    for unknown in (str(uuid.uuid4()), "not-a-uuid"):
        response = await client.put(f"/api/notifications/{unknown}/read")
        assert response.status == 404 and "error" in await response.json()


async def test_listing_pages_newest_first_with_workflow_types(api, sql):
    client, _ = api
    sql.rows("INSERT INTO notifications (id, user_id, type, title, message, recipient, "
             "created_at) SELECT gen_random_uuid(), 'u6', CASE WHEN n % 5 = 0 THEN "
             "'workflow_approval' ELSE 'scan_failed' END, 'title ' || n, 'm', 'x@example.org',"
             " now() - n * interval '1 minute' FROM generate_series(1, 45) n")
    url = "/api/workflow/users/u6/notifications"
    reply = await (await client.get(url)).json()
    assert reply["total"] == 45 and len(reply["notifications"]) == 20
    assert reply["notifications"][0]["title"] == "title 1"  # newest first
    assert set(reply["notifications"][0]) == {"id", "userId", "type", "read", "title", "status",
                                              "createdAt"}
    assert "workflow_approval" in {n["type"] for n in reply["notifications"]}
    last = await (await client.get(url, params={"limit": "100", "offset": "40"})).json()
    assert [n["title"] for n in last["notifications"]] == [f"title {n}" for n in range(41, 46)]
    past_end = await client.get(url, params={"offset": "45"})
    assert past_end.status == 200 and (await past_end.json()) == {"notifications": [],
                                                                  "total": 45, "unread": 45}
    for params in ({"limit": "0"}, {"limit": "101"}, {"limit": "ten"}, {"offset": "-1"},
                   {"limit": "1.5"}):
        response = await client.get(url, params=params)
        assert response.status == 400, params
    nobody = await client.get("/api/workflow/users/nobody/notifications")
    assert nobody.status == 404 and "error" in await nobody.json()


async def test_bearer_token(smtp, database, tmp_path, make_client):
    settings = smtp_settings(database, tmp_path, smtp[1].port,
                             NOTIFICATION_API_TOKEN="s3cret-0123456789")
    client = await make_client(settings)
    url = "/api/workflow/users/u7/notifications"
    for headers in ({}, {"Authorization": "Bearer wrong"},
                    {"Authorization": "s3cret-0123456789"}):
        response = await client.get(url, headers=headers)
        assert response.status == 401 and "token" in (await response.json())["error"]
    response = await client.get(url, headers={"Authorization": "Bearer s3cret-0123456789"})
    assert response.status == 404  # authenticated; this user simply has none


async def test_router_api_absent_when_only_notifications_served(api):
    client, _ = api
    response = await client.get("/health", headers={"X-ID": "aa:bb:cc:dd:ee:ff"})
    assert response.status == 404


async def test_a_record_no_mail_can_carry_fails_alone_and_the_batch_goes_on(smtp, database,
                                                                           tmp_path, sql,
                                                                           caplog):
    """A record stored before today's checks (or by another service) whose title cannot be
    an email header: marked failed for good with its reason, never claimed again, and the
    other due records of the same batch are delivered."""
    inbox, controller = smtp
    settings = smtp_settings(database, tmp_path, controller.port)
    async with open_database(settings) as db:
        poisoned = await store(db, "u9", "vulsource_update", "v 1\u20282", "gus@example.org")
        for user in ("u10", "u11"):
            await store(db, user, "scan_failed", "t", f"{user}@example.org")
        await force_due(sql)
        notifier = Notifier(db, make_mailer(settings), Delivery.from_settings(settings))
        assert await notifier.retry_due() == 2
        sql.rows("UPDATE notifications SET next_attempt_at = now() - interval '1 second' "
                 "WHERE next_attempt_at IS NOT NULL")
        assert await notifier.retry_due() == 0  # the poisoned one is not claimed again
    assert caplog.text.count(poisoned.id) == 1
    assert sorted(recipients for _, recipients, _ in inbox.messages) == \
        [["u10@example.org"], ["u11@example.org"]]
    status, next_attempt, error = sql.rows(
        "SELECT status, next_attempt_at, last_error FROM notifications WHERE id = %s",
        (poisoned.id,))[0]
    assert (status, next_attempt) == ("failed", None)
    assert "cannot be sent as email" in error and "linefeed" in error


async def test_the_mail_goes_only_to_the_one_recipient(api, sql):
    client, inbox = api
    body = {"userId": "u12", "recipient": '"a b"@example.org', "projectId": "p"}
    assert (await client.post("/api/notifications/scan-failed", json=body)).status == 200
    assert [recipients for _, recipients, _ in inbox.messages] == [['"a b"@example.org']]
    assert inbox.messages[0][2]["To"] == '"a b"@example.org'


# Issue 17: idempotency keys, unread counts and the read filter, mark all read, one
# notification with its delivery attempts.

SEND = "/api/notifications/scan-failed"
BODY = {"userId": "u17", "recipient": "kim@example.org", "projectId": "p-17"}
SENT = {"message": "scan_failed notification sent."}


def key(value: str) -> dict:
    return {"Idempotency-Key": value}


async def post(client, body=BODY, headers=None, path=SEND):
    response = await client.post(path, json=body, headers=headers or {})
    return response.status, await response.json()


async def test_a_repeat_gets_the_first_answer_and_sends_nothing(api, sql):
    client, inbox = api
    first = await post(client, headers=key("order-1"))
    reordered = dict(reversed(list(BODY.items())))  # the same body, keys in another order
    again = await post(client, reordered, headers=key("order-1"))
    assert first == again == (200, SENT)
    assert sql.value("SELECT count(*) FROM notifications") == 1 and len(inbox.messages) == 1
    # Without a key, or with another key, each call sends.
    assert (await post(client))[0] == (await post(client, headers=key("order-2")))[0] == 200
    assert sql.value("SELECT count(*) FROM notifications") == 3 and len(inbox.messages) == 3


async def test_a_key_with_another_body_is_422_and_changes_nothing(api, sql):
    client, inbox = api
    assert (await post(client, headers=key("k")))[0] == 200
    for other, path in (({**BODY, "projectId": "p-18"}, SEND),
                        (BODY, "/api/notifications/scheduled-scan-finished")):
        status, reply = await post(client, other, key("k"), path)
        assert status == 422 and "different request body" in reply["error"]
    assert sql.value("SELECT count(*) FROM notifications") == 1 and len(inbox.messages) == 1


async def test_parallel_requests_with_one_key_store_and_send_once(api, sql):
    client, inbox = api
    answers = await asyncio.gather(*(post(client, headers=key("burst")) for _ in range(12)))
    assert set(map(str, answers)) == {str((200, SENT))}
    assert sql.value("SELECT count(*) FROM notifications") == 1 and len(inbox.messages) == 1
    assert sql.rows("SELECT status, response FROM notification_keys") == [(200, SENT)]


async def test_a_failed_first_send_is_answered_again_without_a_second_attempt(api, sql):
    client, inbox = api
    inbox.refuse = True
    first = await post(client, headers=key("flaky"))
    inbox.refuse = False
    again = await post(client, headers=key("flaky"))
    assert first == again and first[0] == 500 and "id" in first[1]
    assert sql.rows("SELECT id::text, attempts FROM notifications") == [(first[1]["id"], 1)]
    assert not inbox.messages  # the background retry delivers it, not the repeat


@pytest.mark.parametrize("headers", [key(""), key("x" * 256), key("caf\u00e9"), key("tab\there"),
                                     [("Idempotency-Key", "a"), ("Idempotency-Key", "b")]])
async def test_bad_keys_are_400_and_store_nothing(api, sql, headers):
    client, _ = api
    response = await client.post(SEND, json=BODY, headers=headers)
    assert response.status == 400 and "Idempotency-Key" in (await response.json())["error"]
    assert sql.value("SELECT count(*) FROM notifications") == 0


async def test_an_expired_key_sends_again(api, sql):
    client, inbox = api
    assert (await post(client, headers=key("old")))[0] == 200
    sql.rows("UPDATE notification_keys SET created_at = now() - interval '25 hours'")
    assert (await post(client, headers=key("old")))[0] == 200
    assert sql.value("SELECT count(*) FROM notifications") == 2 and len(inbox.messages) == 2


async def test_expired_keys_are_forgotten(api, sql, settings):
    client, _ = api
    for name in ("a", "b", "c"):
        await post(client, headers=key(name))
    sql.rows("UPDATE notification_keys SET created_at = now() - interval '2 days' "
             "WHERE key <> 'c'")
    async with open_database(settings) as db:
        assert await notification_keys.forget_expired(db, timedelta(hours=24)) == 2
    assert sql.rows("SELECT key FROM notification_keys") == [("c",)]


async def test_a_repeat_after_the_first_request_died_answers_from_the_record(api, sql):
    """The first request claimed the key and stored its notification, then its process died
    before answering: once the claim runs out, a repeat answers from the stored record."""
    client, inbox = api
    assert (await post(client, headers=key("crash")))[0] == 200
    sql.rows("UPDATE notification_keys SET status = NULL, response = NULL, "
             "claimed_until = now() - interval '1 second'")
    assert await post(client, headers=key("crash")) == (200, SENT)
    sql.rows("UPDATE notifications SET status = 'pending'")
    sql.rows("UPDATE notification_keys SET status = NULL, response = NULL, "
             "claimed_until = now() - interval '1 second'")
    status, reply = await post(client, headers=key("crash"))
    assert status == 500 and "retried" in reply["error"]
    assert sql.value("SELECT count(*) FROM notifications") == 1 and len(inbox.messages) == 1


async def test_unread_count_and_read_filter(api, sql):
    client, _ = api
    for n in range(5):
        await post(client, {**BODY, "projectId": f"p{n}"})
    ids = [row[0] for row in sql.rows("SELECT id::text FROM notifications ORDER BY created_at")]
    for notification_id in ids[:2]:
        assert (await client.put(f"/api/notifications/{notification_id}/read")).status == 200
    feed = "/api/workflow/users/u17/notifications"
    listing = await (await client.get(feed)).json()
    assert (listing["total"], listing["unread"], len(listing["notifications"])) == (5, 3, 5)
    unread = await (await client.get(feed, params={"read": "false"})).json()
    assert (unread["total"], unread["unread"]) == (3, 3)
    assert {n["id"] for n in unread["notifications"]} == set(ids[2:])
    read = await (await client.get(feed, params={"read": "true", "limit": "1"})).json()
    assert (read["total"], [n["id"] for n in read["notifications"]]) == (2, [ids[1]])
    for bad in ("yes", "1", "TRUE", ""):
        response = await client.get(feed, params={"read": bad})
        assert response.status == 400 and "read" in (await response.json())["error"]


async def test_mark_all_read(api, sql):
    client, _ = api
    for n in range(4):
        await post(client, {**BODY, "projectId": f"p{n}"})
    await post(client, {**BODY, "userId": "someone-else"})
    target = "/api/workflow/users/u17/notifications/read"
    response = await client.put(target)
    assert (response.status, await response.json()) == (
        200, {"message": "All notifications marked as read.", "updated": 4})
    assert (await (await client.put(target)).json())["updated"] == 0  # again: nothing unread
    assert sql.rows("SELECT user_id, read FROM notifications WHERE NOT read") == [
        ("someone-else", False)]
    listing = await (await client.get("/api/workflow/users/u17/notifications")).json()
    assert listing["unread"] == 0
    missing = await client.put("/api/workflow/users/nobody/notifications/read")
    assert missing.status == 404 and "error" in await missing.json()


async def test_one_notification_with_its_delivery_attempts(api, smtp, sql, database, tmp_path):
    client, inbox = api
    inbox.refuse = True
    status, reply = await post(client)
    assert status == 500
    detail = await (await client.get(f"/api/notifications/{reply['id']}")).json()
    assert (detail["id"], detail["status"], detail["recipient"]) == (
        reply["id"], "failed", "kim@example.org")
    assert "550" in detail["lastError"] and detail["nextAttemptAt"]
    assert [(a["attempt"], a["outcome"]) for a in detail["attempts"]] == [(1, "failed")]
    inbox.refuse = False
    await force_due(sql)
    assert await retry_once(smtp_settings(database, tmp_path, smtp[1].port)) == 1
    detail = await (await client.get(f"/api/notifications/{reply['id']}")).json()
    assert detail["status"] == "sent" and detail["lastError"] is None
    assert detail["nextAttemptAt"] is None
    assert [(a["attempt"], a["outcome"]) for a in detail["attempts"]] == [(1, "failed"),
                                                                         (2, "sent")]
    assert detail["attempts"][0]["error"] and detail["attempts"][1]["error"] is None
    for unknown in ("0b5f3f5e-1111-4222-8333-444455556666", "not-a-uuid"):
        response = await client.get(f"/api/notifications/{unknown}")
        assert response.status == 404 and "error" in await response.json()


class MailerThenDatabaseGone:
    """Delivers through the real mailer, then the database goes away (before the outcome is
    recorded)."""

    def __init__(self, mailer, proxy):
        self._mailer, self._proxy = mailer, proxy

    async def send(self, message) -> None:
        await self._mailer.send(message)
        self._proxy.go_down()


async def test_a_sent_mail_whose_outcome_was_not_recorded_is_never_sent_again(
        smtp, database, tmp_path, sql):
    """Issue 24: the database went away between the SMTP exchange and recording it; the
    record stayed pending and the retry loop sent the mail a second time."""
    inbox, controller = smtp
    proxy = await TcpProxy(database.host, database.port).start()
    location = proxy.location(database)
    settings = smtp_settings(location, tmp_path, controller.port, DB_TIMEOUT_SECONDS="2")
    try:
        async with open_database(settings) as db:
            notifier = Notifier(db, MailerThenDatabaseGone(make_mailer(settings), proxy),
                                Delivery.from_settings(settings))
            record = await store(db, "u", "scan_failed", "t", "dave@example.org")
            with pytest.raises(DatabaseUnavailable):
                await notifier.deliver(record)
            assert sql.value("SELECT status FROM notifications") == "pending"
            proxy.come_back()
            await force_due(sql)  # as if the pending grace had passed
            await notifier.record_unrecorded()
            assert await notifier.retry_due() == 0
    finally:
        await proxy.close()
    assert sql.value("SELECT status FROM notifications") == "sent"
    assert len(inbox.messages) == 1


async def test_a_claim_that_reached_the_database_after_the_loop_gave_up_is_released(
        smtp, database, tmp_path, sql):
    """A retry claim whose statement reached the database after the loop had given up on
    it (the fault drill: a network cut delivered it late) held the notification for the
    whole lease, 5 minutes. The loop's next round makes it due again and delivers it; a claim
    of another process is left alone."""
    inbox, controller = smtp
    settings = smtp_settings(database, tmp_path, controller.port)
    async with open_database(settings) as db:
        notifier = Notifier(db, make_mailer(settings), Delivery.from_settings(settings))
        other = Notifier(db, make_mailer(settings), Delivery.from_settings(settings))
        await store(db, "u", "scan_failed", "lost", "gil@example.org")
        await force_due(sql)
        # The loop's claim, executed as the late statement was: taken, its answer unseen.
        await notification_db.claim_retries(db, RETRY_BATCH, RETRY_LEASE, notifier.owner)
        await store(db, "u", "scan_failed", "elsewhere", "hal@example.org")
        sql.rows("UPDATE notifications SET next_attempt_at = now() WHERE title = 'elsewhere'")
        await notification_db.claim_retries(db, RETRY_BATCH, RETRY_LEASE, other.owner)
        assert await notifier.retry_due() == 1
    assert sql.rows("SELECT title, status, claimed_by FROM notifications ORDER BY title") == [
        ("elsewhere", "pending", other.owner), ("lost", "sent", None)]
    assert [message[1] for message in inbox.messages] == [["gil@example.org"]]


INJECTION = ("=?utf-8?q?1=0D=0ABcc:_x@evil.example=0D=0AContent-Type:_text/html=0D=0A=0D=0A"
             "<a_href=3Dhttps://evil.example>login</a>?=")


@pytest.mark.parametrize("path,field", [("scan-failed", "projectId"),
                                        ("vulsource-update", "versionNumber")])
async def test_an_encoded_word_never_reaches_a_header(api, sql, path, field):
    """Issue 27, finding 2: the email package decoded this into real Bcc, Content-Type and
    an HTML body of the caller's (CVE-2024-6923)."""
    client, inbox = api
    response = await client.post(f"/api/notifications/{path}", json={
        "userId": "u", "recipient": "erin@example.org", field: INJECTION})
    assert response.status == 400
    assert "=?" in (await response.json())["error"]
    assert sql.value("SELECT count(*) FROM notifications") == 0 and inbox.messages == []


async def test_a_stored_record_with_an_encoded_word_is_undeliverable(smtp, database,
                                                                      tmp_path, sql):
    inbox, controller = smtp
    settings = smtp_settings(database, tmp_path, controller.port)
    async with open_database(settings) as db:
        notifier = Notifier(db, make_mailer(settings), Delivery.from_settings(settings))
        record = await store(db, "u", "scan_failed", f"Scan failed for project {INJECTION}",
                             "erin@example.org")
        assert "Subject" in await notifier.deliver(record)
        await force_due(sql)
        assert await notifier.retry_due() == 0
    assert inbox.messages == []
    assert sql.rows("SELECT status, next_attempt_at FROM notifications") == [("failed", None)]


async def test_plain_fields_arrive_with_exactly_the_expected_headers(api):
    client, inbox = api
    response = await client.post("/api/notifications/scan-failed", json={
        "userId": "u", "recipient": "erin@example.org", "projectId": "web-shop = 2? no"})
    assert response.status == 200
    (sender, recipients, message), = inbox.messages
    assert recipients == ["erin@example.org"]
    assert sorted(message.keys()) == ["Content-Transfer-Encoding", "Content-Type", "Date",
                                      "From", "MIME-Version", "Message-ID", "Subject", "To",
                                      "X-Notification-Type"]
    assert message.get_content_type() == "text/plain"
    assert message["Subject"] == "Scan failed for project web-shop = 2? no"
