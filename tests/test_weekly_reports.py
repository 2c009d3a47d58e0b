"""The owners' weekly reports (issue 83): each owner gets one email a week naming what each of
their routers did (alerts by severity, the addresses and signatures most seen, sightings,
rules, last contact, gone quiet), all quiet said too, the same figures in their feed; never
twice for one week, never of what a router did before it was theirs, bounded for an owner of
many routers, at the moment the owner chose or not at all."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import orjson
import pytest

from server.reports import figures
from server.reports.schedule import Schedule, ScheduleInvalid, checked_zone, parse_at
from server.reports.weekly import TYPE, send_weekly_reports
from server.typedefs import DATABASE, NOTIFIER
from testkit.database import command_env
from tests.commands import router_backend
from tests.test_intel import house, subscriptions  # noqa: F401 (fixture)
from tests.test_intel import feeds  # noqa: F401 (fixture)
from tests.test_intel_truth import body
from tests.test_notifications import smtp  # noqa: F401 (fixture)

BUSY, SILENT, CALM, SOLD = ("02:83:00:00:00:01", "02:83:00:00:00:02", "02:83:00:00:00:03",
                            "02:83:00:00:00:04")
ATTACKER, SCANNER, LAN = "45.33.32.77", "198.20.70.1", "192.168.1.20"


def alert(src: str, dest: str, sid: int, severity: int, flow: int) -> dict:
    return {"timestamp": "2026-12-01T10:00:00+00:00", "event_type": "alert", "flow_id": flow,
            "src_ip": src, "src_port": 40000, "dest_ip": dest, "dest_port": 22,
            "proto": "TCP", "alert": {"signature_id": sid, "severity": severity}}


async def send(client, router: str, records: list[dict]) -> None:
    answer = await client.post("/log/events", headers={
        "X-ID": router, "Content-Type": "application/x-ndjson"},
                               data=b"\n".join(orjson.dumps(r) for r in records))
    assert answer.status == 200, await answer.text()


async def poll(client, router: str) -> None:
    answer = await client.get("/rules/last_updated", headers={"X-ID": router})
    assert answer.status == 200, await answer.text()


async def reports(settings, *args: str):
    return await asyncio.to_thread(router_backend, command_env(settings), "reports",
                                   "weekly", *args)


def own(settings, router: str, user: str, *more: str) -> None:
    done = subscriptions(settings, "owner", router, "--user", user, "--email",
                         f"{user}@example.org", *more)
    assert done.returncode == 0, done.stderr


def next_hour() -> datetime:
    return (datetime.now(timezone.utc) + timedelta(hours=1)).replace(minute=0, second=0,
                                                                      microsecond=0)


def reported(sql, user: str) -> list[dict]:
    return [orjson.loads(m) if isinstance(m, str) else m for (m,) in sql.rows(
        f"SELECT metadata FROM notifications WHERE type = '{TYPE}' AND user_id = '{user}' "
        "ORDER BY created_at")]


def router_of(report: dict, mac: str) -> dict:
    return next(week for week in report["routers"] if week["mac"] == mac)


async def test_each_owner_gets_one_true_report_a_week_quiet_ones_too(house, sql):
    """Planted: BUSY's alerts uploaded now (5 from an attacker, 2 to a scanner it reached),
    an hour of summaries two days ago and a packed day four days ago, plus eight days ago
    (the week before: not counted); SILENT never calls; CALM polls and sees nothing. Every
    figure of the reports is what was planted, each owner is emailed once, the feed holds
    the same report, and a rerun tells nobody again."""
    settings, client, inbox, _, _ = house
    db, notifier = client.app[DATABASE], client.app[NOTIFIER]
    await send(client, BUSY, [alert(ATTACKER, LAN, 2001219, 1, n) for n in range(5)]
               + [alert(LAN, SCANNER, 2010935, 2, 10 + n) for n in range(2)])
    for router in (BUSY, CALM):
        await poll(client, router)
    sql.rows(f"INSERT INTO routers (mac) VALUES ('{SILENT}')")
    own(settings, BUSY, "alice")
    own(settings, SILENT, "alice")
    own(settings, CALM, "carol")
    sql.rows("UPDATE routers SET registered_at = now() - interval '9 days'")  # planted below
    day = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    sql.rows(f"""INSERT INTO telemetry_alerts (mac, hour, src_ip, dest_ip, signature_id,
                     severity, alerts, last_seen, flow_ids)
                 VALUES ('{BUSY}', '{(day - timedelta(days=2)).isoformat()}', '{ATTACKER}',
                         '{LAN}', 2001219, 1, 10, now(), '{{}}'),
                        ('{BUSY}', '{(day - timedelta(days=8)).isoformat()}', '{ATTACKER}',
                         '{LAN}', 2001219, 1, 1000, now(), '{{}}')""")
    sql.rows(f"""INSERT INTO telemetry_alert_days (mac, day, hours, src_ips, dest_ips,
                     signature_ids, severities, alerts, last_seen, flow_ids, networks)
                 VALUES ('{BUSY}', '{(day - timedelta(days=4)).isoformat()}', '{{3, 4}}',
                         '{{{SCANNER}, {ATTACKER}}}', '{{{LAN}, {LAN}}}', '{{2402000, 2001219}}',
                         '{{3, NULL}}', '{{20, 1}}', ARRAY[now(), now()], '{{"[]", "[]"}}',
                         '{{NULL, NULL}}')""")
    # What BUSY's firewall dropped (its enforcement reports): two days ago and today; eight
    # days ago is the week before.
    sql.rows(f"""INSERT INTO enforcement_days (mac, day, list, packets, bytes) VALUES
                 ('{BUSY}', '{(day - timedelta(days=2)).date()}', 'firewall', 7, 700),
                 ('{BUSY}', '{(day - timedelta(days=2)).date()}', 'fleet', 5, 500),
                 ('{BUSY}', '{day.date()}', 'intel', 3, 300),
                 ('{BUSY}', '{(day - timedelta(days=8)).date()}', 'firewall', 1000, 1)""")

    end = next_hour()
    done = await reports(settings, "--week-ending", end.isoformat())
    assert done.returncode == 0, done.stderr
    assert "2 weekly reports made for 3 routers" in done.stdout
    await notifier.retry_due()
    assert sorted(to for _, (to,), _ in inbox.messages) == ["alice@example.org",
                                                            "carol@example.org"]

    [alice] = reported(sql, "alice")
    busy, silent = router_of(alice, BUSY), router_of(alice, SILENT)
    assert busy["alerts"] == {"total": 38, "high": 15, "medium": 2, "low": 20, "other": 1}
    assert busy["top_remote"][:2] == [{"address": SCANNER, "alerts": 22},
                                      {"address": ATTACKER, "alerts": 16}]
    assert [(s["sid"], s["alerts"]) for s in busy["top_signatures"]] == [
        (2402000, 20), (2001219, 16), (2010935, 2)]
    assert busy["quiet"] is False and busy["last_contact"] is not None
    assert silent["quiet"] is True and silent["last_contact"] is None
    assert silent["alerts"]["total"] == 0
    assert alice["routers"][0]["mac"] == SILENT  # gone quiet: first to look at
    assert alice["totals"] == {"routers": 2, "alerts": 38, "sightings": 0, "quiet_routers": 1,
                               "rules_not_current": 2, "blocked_packets": 15}
    assert busy["blocked"] == {"packets": 15, "bytes": 1500, "firewall": 7, "fleet": 5,
                               "intel": 3}
    assert silent["blocked"] is None  # it sends no enforcement report
    assert alice["all_quiet"] is False and alice["period"]["end"] == end.isoformat()

    [carol] = reported(sql, "carol")
    assert carol["all_quiet"] is True and router_of(carol, CALM)["quiet"] is False
    mails = {to[0]: message for _, to, message in inbox.messages}
    assert mails["carol@example.org"]["Subject"] == "Your week: all quiet at your router"
    assert "All quiet" in body(mails["carol@example.org"])
    text = body(mails["alice@example.org"]).replace("\r\n", "\n")
    assert mails["alice@example.org"]["Subject"] == "Your week: 38 IDS alerts at your 2 routers"
    assert f"Router {SILENT}\n  Gone quiet: no contact in 35 days or more" in text
    assert f"{SCANNER} (22), {ATTACKER} (16)" in text
    assert "IDS alerts: 38 (high 15, medium 2, low 20, other 1)" in text
    assert ("Blocked by its firewall: 15 packets (its own list 7, the fleet's 5, threat "
            "intelligence 3)") in text

    feed = await (await client.get("/api/workflow/users/alice/notifications")).json()
    [listed] = [n for n in feed["notifications"] if n["type"] == TYPE]
    whole = await (await client.get(f"/api/notifications/{listed['id']}")).json()
    assert whole["metadata"] == alice and whole["title"] == listed["title"]

    again = await reports(settings, "--week-ending", end.isoformat())
    assert "0 weekly reports made" in again.stdout
    await send_weekly_reports(db, now=end + timedelta(hours=1))  # the job: default Monday
    await notifier.retry_due()
    assert len(inbox.messages) == 2 and len(reported(sql, "alice")) == 1


async def test_a_router_is_reported_to_its_owner_only_from_when_it_became_theirs(house, sql):
    """SOLD's alerts of this hour were its first owner's: the second owner's report counts
    none of them, and the first owner's report no longer names the router."""
    settings, client, _, _, _ = house
    await send(client, SOLD, [alert(ATTACKER, LAN, 2001219, 1, n) for n in range(3)])
    await poll(client, CALM)
    own(settings, SOLD, "first")
    own(settings, CALM, "first")   # the first owner still has a router, so a report
    own(settings, SOLD, "second")
    sql.rows(f"INSERT INTO enforcement_days (mac, day, list, packets, bytes) VALUES ('{SOLD}', "
             "(now() AT TIME ZONE 'UTC')::date, 'fleet', 9, 9)")  # today's: partly the first's
    done = await reports(settings, "--week-ending", next_hour().isoformat())
    assert done.returncode == 0, done.stderr
    [second] = reported(sql, "second")
    assert second["totals"]["alerts"] == 0 and second["routers"][0]["mac"] == SOLD
    assert second["routers"][0]["blocked"] is None
    [first] = reported(sql, "first")
    assert [week["mac"] for week in first["routers"]] == [CALM]


async def test_an_owner_of_many_routers_gets_one_bounded_report(house, sql):
    settings, client, inbox, _, _ = house
    many = [f"02:84:00:00:{n >> 8:02x}:{n & 255:02x}" for n in range(300)]
    sql.rows("INSERT INTO routers (mac, owner_user, owner_email) SELECT m::macaddr, 'fleet', "
             "'fleet@example.org' FROM unnest(ARRAY[%s]) m" % ", ".join(f"'{m}'" for m in many))
    await send(client, many[7], [alert(ATTACKER, LAN, 2001219, 1, 1)])
    await poll(client, many[7])
    done = await reports(settings, "--week-ending", next_hour().isoformat())
    assert "1 weekly reports made for 300 routers" in done.stdout
    [report] = reported(sql, "fleet")
    assert len(report["routers"]) == figures.TOP_ROUTERS
    assert report["routers_not_listed"] == 300 - figures.TOP_ROUTERS
    assert report["totals"]["alerts"] == 1 and report["totals"]["quiet_routers"] == 299
    await client.app[NOTIFIER].retry_due()
    [(_, _, message)] = inbox.messages
    assert len(body(message)) < 20_000
    assert f"... and {300 - figures.TOP_ROUTERS} more routers." in body(message)


async def test_the_report_comes_when_the_owner_chose_or_not_at_all(house, sql):
    settings, client, _, _, _ = house
    db = client.app[DATABASE]
    for router in (CALM, BUSY):
        await poll(client, router)
    own(settings, CALM, "carol", "--weekly-at", "wed 18:00", "--zone", "Europe/Prague")
    own(settings, BUSY, "bob", "--weekly", "off")
    # Wednesday 2 December 2026, 17:30 and 18:30 in Prague (UTC+1).
    before, after = (datetime(2026, 12, 2, 16, 30, tzinfo=timezone.utc),
                     datetime(2026, 12, 2, 17, 30, tzinfo=timezone.utc))
    sql.rows("DELETE FROM weekly_reports")
    assert (await send_weekly_reports(db, now=before, users=["carol"]))["reports"] == 1
    [report] = reported(sql, "carol")
    assert report["period"]["end"] == "2026-11-25T17:00:00+00:00"  # the Wednesday before
    assert (await send_weekly_reports(db, now=after))["reports"] == 1
    assert reported(sql, "carol")[1]["period"]["end"] == "2026-12-02T17:00:00+00:00"
    assert (await send_weekly_reports(db, now=after + timedelta(days=6)))["reports"] == 0
    assert reported(sql, "bob") == []
    own(settings, BUSY, "bob", "--weekly", "on")
    assert (await send_weekly_reports(db, now=after, users=["bob"]))["reports"] == 1
    refused = subscriptions(settings, "owner", CALM, "--weekly-at", "someday 25:00")
    assert refused.returncode == 2 and "expected a weekday and an hour" in refused.stderr
    refused = subscriptions(settings, "owner", CALM, "--zone", "Mars/Olympus\r\nBcc: x@y")
    assert refused.returncode == 2 and "not a time zone name" in refused.stderr
    assert sql.value("SELECT zone FROM owner_reports WHERE user_id = 'carol'") == "Europe/Prague"


def test_a_schedule_follows_the_owners_clock_across_a_change_of_time():
    schedule = Schedule(weekday=7, hour=2, zone="Europe/Prague")  # Sunday 02:00
    # 29 March 2026, clocks go from 02:00 to 03:00 in Prague: the hour skipped is the next.
    moment = schedule.last_moment(datetime(2026, 3, 29, 12, tzinfo=timezone.utc))
    assert moment == datetime(2026, 3, 29, 1, tzinfo=timezone.utc)
    summer = schedule.last_moment(datetime(2026, 4, 6, tzinfo=timezone.utc))
    assert summer == datetime(2026, 4, 5, 0, tzinfo=timezone.utc)  # 02:00 CEST
    assert schedule.due(datetime(2026, 4, 6, tzinfo=timezone.utc), moment) == summer
    assert schedule.due(datetime(2026, 4, 6, tzinfo=timezone.utc), summer) is None
    assert parse_at("Fri 7") == (5, 7)
    for wrong in ("fri 24", "friday 08:00", "fri 08:30", ""):
        with pytest.raises(ScheduleInvalid):
            parse_at(wrong)
    with pytest.raises(ScheduleInvalid):
        checked_zone("../../etc/passwd")
