"""What threat intelligence tells owners is true and theirs (issue 80): a value that is never
delivered (not public, allowlisted for the fleet or the router, the service's own, held or
suppressed) is never sighted nor told; the prevalence hold is a share of the routers that
count for the fleet; a new version's values are judged before any router gets them; an owner
is told only of what the router saw while it was theirs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import orjson

from server.intel import sql as intel_db
from server.intel.config import IntelConfig
from server.intel.jobs import match_now
from server.hunt.packing import pack
from server.hunt.recent import MARK_MARGIN
from server.typedefs import DATABASE, NOTIFIER
from testkit.database import command_env
from testkit.waiting import wait_for
from tests.commands import router_backend
from tests.test_hunt import dns, upload
from tests.test_hunt_packed import plant, sybils
from tests.test_intel import decoded, house, intel, intel_document, subscriptions  # noqa: F401
from tests.test_intel import feeds  # noqa: F401 (fixture)
from tests.test_notifications import smtp  # noqa: F401 (fixture)

HOME, NEIGHBOUR = "02:12:00:00:00:01", "02:12:00:00:00:02"
PRIVATE, DOCUMENTATION, PARTNER, OWN, PUBLIC = (
    "172.17.0.5", "203.0.113.50", "93.184.216.34", "45.60.1.1", "45.33.32.77")


def flow(address: str) -> dict:
    return {"event_type": "flow", "src_ip": "192.168.1.20", "dest_ip": address,
            "proto": "TCP"}


async def established(db, prefix: str, count: int, name: str, days_ago: int) -> list[str]:
    """`count` routers that looked `name` up `days_ago` days ago, registered 4 days ago:
    old enough to count for the fleet."""
    routers = sybils(prefix, count)
    await plant(db, routers, [name], datetime.now(timezone.utc) - timedelta(days=days_ago))
    await db.execute("UPDATE routers SET registered_at = now() - interval '4 days'")
    return routers


def sighted(rows: dict) -> set[tuple[str, str]]:
    return {(s["mac"], s["indicator"]) for s in rows["sightings"] if not s["closed"]}


async def test_a_value_never_delivered_is_never_sighted_nor_told(house, sql):
    settings, client, inbox, served, base = house
    for router in (HOME, NEIGHBOUR):
        await upload(client, router, [flow(a) for a in (PRIVATE, DOCUMENTATION, PARTNER, OWN,
                                                        PUBLIC)])
        assert subscriptions(settings, "owner", router, "--user", f"u{router[-1]}",
                             "--email", f"u{router[-1]}@example.org").returncode == 0
    env = command_env(settings)
    assert router_backend(env, "allowlist", "add", "93.184.216.0/24", "--note",
                          "partner").returncode == 0
    assert router_backend(env, "allowlist", "add", OWN, "--mac", HOME, "--note",
                          "my office").returncode == 0
    served.bodies["/mixed.txt"] = (200, "\n".join(
        [PRIVATE, DOCUMENTATION, PARTNER, OWN, PUBLIC]).encode(), {})
    assert (await intel(settings, "add", "mixed", f"{base}mixed.txt", "--format",
                        "plain")).returncode == 0
    done = await intel(settings, "fetch")
    assert done.returncode == 0, done.stdout + done.stderr

    rows = orjson.loads((await intel(settings, "sightings", "--json")).stdout)
    assert sighted(rows) == {(HOME, PUBLIC), (NEIGHBOUR, PUBLIC), (NEIGHBOUR, OWN)}
    told = sql.rows("SELECT user_id, metadata->>'indicator' FROM notifications ORDER BY 1, 2")
    assert told == [("u1", PUBLIC), ("u2", PUBLIC), ("u2", OWN)]
    listed = (await intel(settings, "list")).stdout.splitlines()
    assert listed[0].split("\t")[5] == "withheld"
    assert "\t3 (allowlisted: 1, not public: 2)\t" in listed[1], listed
    document, _ = await intel_document(client, NEIGHBOUR)
    assert sorted(e["address"] for e in document["block"]) == [PUBLIC, OWN]


async def test_sightings_recorded_before_the_rails_are_closed_and_never_told(house, sql):
    """A sighting of a private address, as the release before recorded them: closed by the
    next match, listed with why, and nobody told."""
    settings, client, inbox, _, _ = house
    await upload(client, HOME, [flow(PRIVATE)])
    assert subscriptions(settings, "owner", HOME, "--user", "u1", "--email",
                         "u1@example.org").returncode == 0
    sql.rows(f"INSERT INTO intel_sightings (mac, kind, value, source, first_seen, last_seen, "
             f"days, records) VALUES ('{HOME}', 'ip', '{PRIVATE}', 'old', now(), now(), 1, 1), "
             f"('{HOME}', 'ip', '{PUBLIC}', 'old', now(), now(), 1, 1)")
    await match_now(client.app[DATABASE], IntelConfig.from_settings(settings))  # (or the job)
    rows = orjson.loads((await intel(settings, "sightings", "--json")).stdout)["sightings"]
    assert {(s["indicator"], s["closed"]) for s in rows} == {(PRIVATE, "not public"),
                                                             (PUBLIC, None)}
    assert sql.rows("SELECT metadata->>'indicator' FROM notifications") == [(PUBLIC,)]
    listed = (await intel(settings, "sightings")).stdout
    assert "closed: not public" in listed


async def test_fresh_macs_cannot_lift_a_value_out_of_the_hold(house, sql):
    """20 established routers saw a name; 2,000 fresh MACs registered do not make it rare
    (the red team's first attack: the share was taken of every registered router)."""
    settings, client, _, served, base = house
    db = client.app[DATABASE]
    old = await established(db, "02:13:00:00", 20, "popular-cdn.example", days_ago=2)
    await pack(db)
    await db.execute("INSERT INTO routers (mac) SELECT ('02:14:00:00:' || "
                     "lpad(to_hex(n >> 8), 2, '0') || ':' || lpad(to_hex(n & 255), 2, '0'))"
                     "::macaddr FROM generate_series(0, 1999) n")
    served.bodies["/cdn.txt"] = (200, b"popular-cdn.example\n", {})
    assert (await intel(settings, "add", "cdn", f"{base}cdn.txt", "--format",
                        "plain")).returncode == 0
    assert (await intel(settings, "fetch")).returncode == 0
    assert "popular-cdn.example\theld\t20" in (await intel(settings, "decisions")).stdout
    assert sql.value("SELECT count(*) FROM intel_sightings") == 0
    document, _ = await intel_document(client, old[0])
    assert decoded(document["files"].get("rb-intel-domains.lst", "")) == []


async def test_a_new_version_is_judged_before_any_router_gets_it(house, sql):
    """Taken but not yet retro-hunted, a version's values are in no document: a value the
    whole fleet saw never reaches a router, not even while the hunt runs."""
    settings, client, _, _, _ = house
    db = client.app[DATABASE]
    await established(db, "02:15:00:00", 12, "everyones-resolver.example", days_ago=1)
    await intel_db.add_feed(db, "new", None, "plain", None, 50, "test")
    now = datetime.now(timezone.utc)
    rows = [("domain", value, 50, now, now, now + timedelta(days=30))
            for value in ("example.everyones-resolver", "example.rare-c2")]
    await intel_db.swap_version(db, "new", rows, 2, {}, None, None, "test")
    document, etag = await intel_document(client, HOME)
    assert decoded(document["files"].get("rb-intel-domains.lst", "")) == []
    await match_now(db, IntelConfig.from_settings(settings))
    held = (await intel(settings, "decisions")).stdout
    assert "everyones-resolver.example\theld\t12" in held
    async def judged() -> list[str]:  # once the judgement's notification reached the app
        document, _ = await intel_document(client, HOME)
        return decoded(document["files"].get("rb-intel-domains.lst", ""))
    assert await wait_for(judged, timeout=30, interval=0.05) == ["rare-c2.example"]


async def test_a_new_owner_is_told_only_of_what_was_seen_while_the_router_was_theirs(house,
                                                                                     sql):
    settings, client, inbox, served, base = house
    await upload(client, HOME, [dns("alices-clinic.example")])
    assert subscriptions(settings, "owner", HOME, "--user", "alice", "--email",
                         "alice@example.org").returncode == 0
    assert subscriptions(settings, "owner", HOME, "--user", "bob", "--email",
                         "bob@example.org").returncode == 0
    # Alice changing her address is the same ownership.
    assert subscriptions(settings, "owner", HOME, "--user", "bob", "--email",
                         "bob2@example.org").returncode == 0
    served.bodies["/clinic.txt"] = (200, b"alices-clinic.example\n", {})
    assert (await intel(settings, "add", "clinic", f"{base}clinic.txt", "--format",
                        "plain")).returncode == 0
    assert (await intel(settings, "fetch")).returncode == 0
    assert sql.value("SELECT count(*) FROM intel_sightings") == 1
    assert sql.value("SELECT count(*) FROM notifications") == 0
    # Bob's own traffic of the name, later, is his to be told of, from his ownership on.
    since = sql.value("SELECT owner_since FROM routers WHERE mac = %s", (HOME,))
    # A posting's times are whole seconds: an upload in the second the ownership began is
    # not known to be after it (and bob is not told of it). Bob's comes a second later.
    async def a_second_later() -> bool:
        return sql.value("SELECT now() >= date_trunc('second', %s::timestamptz) "
                         "+ interval '1 second'", (since,))
    assert await wait_for(a_second_later, timeout=5, interval=0.05)
    await upload(client, HOME, [dns("alices-clinic.example")])
    await match_now(client.app[DATABASE], IntelConfig.from_settings(settings))
    told = sql.rows("SELECT user_id, recipient, metadata->>'first_seen', metadata, message "
                    "FROM notifications")
    assert [(user, to) for user, to, *_ in told] == [("bob", "bob2@example.org")]
    assert datetime.fromisoformat(told[0][2]) >= since
    # The sighting's records count alice's upload too: bob is not told that count.
    assert sql.value("SELECT records FROM intel_sightings") == 2
    assert told[0][3]["records"] is None
    assert "2 records" not in told[0][4] and "not counted apart" in told[0][4]


PAGE = b"""<!doctype html>
<html><head><title>Sign in</title>
<script src="https://cdn.jsdelivr.net/npm/x.js"></script></head>
<body><a href="https://www.google.com/">Google</a>
<p>See https://www.w3.org/ for more</p>
</body></html>
"""


async def test_a_version_that_is_not_its_feed_is_refused_and_the_previous_kept(house, sql):
    """The red team's seventh attack: a 200 with a web page became three indicators and
    replaced the feed whole. A web page, a version mostly not of the feed's format, and one
    dropping most of the previous version are refused; the previous version stays."""
    settings, client, _, served, base = house
    listed = [f"c2-{n}.bad.example" for n in range(40)]
    served.bodies["/list.txt"] = (200, "\n".join(listed).encode(), {})
    assert (await intel(settings, "add", "list", f"{base}list.txt", "--format",
                        "plain")).returncode == 0
    assert (await intel(settings, "fetch")).returncode == 0

    async def kept(why: str) -> None:
        done = await intel(settings, "fetch")
        assert done.returncode == 1 and why in done.stdout, done.stdout + done.stderr
        assert sql.value("SELECT count(*) FROM intel_indicators") == 40
        assert why in (await intel(settings, "list")).stdout

    served.bodies["/list.txt"] = (200, PAGE, {"Content-Type": "text/html; charset=utf-8"})
    await kept("a web page (text/html)")
    served.bodies["/list.txt"] = (200, PAGE, {"Content-Type": "text/plain"})
    await kept("lines are not plain: not a plain feed")
    served.bodies["/list.txt"] = (200, "\n".join(listed[:15]).encode(), {})
    await kept("drops 25 of the previous 40 indicators")
    # The operator says the feed may shrink: the next fetch takes it.
    assert (await intel(settings, "may-shrink", "list", "yes")).returncode == 0
    done = await intel(settings, "fetch")
    assert done.returncode == 0 and "list: 15 indicators (0 new, 25 gone)" in done.stdout
    # An operator's own import is taken as it is.
    (file := settings.data_dir / "five.txt").write_text("\n".join(listed[:5]))
    assert (await intel(settings, "may-shrink", "list", "no")).returncode == 0
    done = await intel(settings, "import", str(file), "--feed", "list")
    assert done.returncode == 0 and "5 indicators (0 new, 10 gone)" in done.stdout


def body(message) -> str:
    part = message.get_body(("plain",)) if hasattr(message, "get_body") else message
    return (part or message).get_payload(decode=True).decode()


async def test_the_sightings_email_names_every_sighting_since_the_last(house, sql):
    """A new user's finding: the one email its owner got named one of six sightings. The
    hour's email names its batch (ten, the rest counted); a sighting later in the hour is in
    the feed at once and in the first email after the hour, sent with nothing new."""
    settings, client, inbox, served, base = house
    db, notifier = client.app[DATABASE], client.app[NOTIFIER]
    names = [f"c2-{n:02}.listed.example" for n in range(13)]
    await upload(client, HOME, [dns(name) for name in names[:12]])
    assert subscriptions(settings, "owner", HOME, "--user", "u1", "--email",
                         "u1@example.org").returncode == 0
    served.bodies["/c2.txt"] = (200, "\n".join(names).encode(), {})
    assert (await intel(settings, "add", "c2", f"{base}c2.txt", "--format",
                        "plain")).returncode == 0
    assert (await intel(settings, "fetch")).returncode == 0
    await notifier.retry_due()
    [(_, to, first)] = inbox.messages
    text = body(first)
    assert to == ["u1@example.org"] and "Also since your last email (11)" in text
    assert sum(name in text for name in names[:12]) == 11 and "and 1 more" in text
    assert sql.value("SELECT count(*) FROM notifications WHERE channel = 'feed'") == 11

    await upload(client, HOME, [dns(names[12])])
    await match_now(db, IntelConfig.from_settings(settings))
    await notifier.retry_due()
    assert len(inbox.messages) == 1  # within the hour: the feed only
    feed = await (await client.get("/api/workflow/users/u1/notifications")).json()
    assert feed["total"] == 13
    sql.rows("UPDATE notifications SET created_at = created_at - interval '61 minutes'")
    await match_now(db, IntelConfig.from_settings(settings))
    await notifier.retry_due()
    [_, (_, _, digest)] = inbox.messages
    assert digest["Subject"] == "A threat indicator was seen at your routers"
    assert names[12] in body(digest) and names[0] not in body(digest)
    await match_now(db, IntelConfig.from_settings(settings))  # told once
    assert sql.value("SELECT count(*) FROM notifications WHERE channel = 'email'") == 2


async def test_a_value_is_written_as_everywhere(house, sql):
    """A new user's finding: `intel suppress wpad.example.net` was refused ("write
    KIND:VALUE") where `hunt` takes a bare domain."""
    settings = house[0]
    for written in ("wpad.example.net", "domain wpad2.example.net", "ip:45.1.2.3", "45.1.2.4"):
        done = await intel(settings, "suppress", written, "--note", "ours")
        assert done.returncode == 0, done.stderr
    assert sorted(sql.rows("SELECT kind, value FROM intel_decisions")) == [
        ("domain", "net.example.wpad"), ("domain", "net.example.wpad2"), ("ip", "45.1.2.3"),
        ("ip", "45.1.2.4")]
    refused = await intel(settings, "suppress", "sid:1", "--note", "no")
    assert refused.returncode == 2 and "no threat feed's value" in refused.stderr


async def test_the_minutes_match_reads_only_the_indicators_new_postings_name(house, sql):
    """A red team's feed of 1,000,000 indicators kept the minute's match running 55 to 86 s
    of every 60: it read every current indicator each minute. It reads those the index
    gained postings of since its last run (a network's by its addresses), and those an
    operator released since: 3,000 indicators, then one upload naming a domain under one
    and an address in a /28 of the feed: 2 read, both sighted; once the upload is older than
    the mark's margin, a minute with no upload reads 0."""
    settings, client, _, served, base = house
    db, config = client.app[DATABASE], IntelConfig.from_settings(settings)
    names = [f"quiet{n:04d}.example" for n in range(2998)]
    served.bodies["/big.txt"] = (200, "\n".join(
        [*names, "c2.loud.example", "45.33.32.64/28"]).encode(), {})
    assert (await intel(settings, "add", "big", f"{base}big.txt", "--format",
                        "plain")).returncode == 0
    assert (await intel(settings, "fetch")).returncode == 0
    first = await match_now(db, config)
    assert first["live"]["indicators"] == 3000  # the first run reads every one, once
    await upload(client, HOME, [dns("beacon.c2.loud.example"), flow(PUBLIC)])
    second = await match_now(db, config)
    assert second["live"]["indicators"] == 2 and second["live"]["new_sightings"] == 2
    assert sql.rows("SELECT value FROM intel_sightings ORDER BY 1") == [
        ("45.33.32.64/28",), ("example.loud.c2",)]
    again = await match_now(db, config)  # within MARK_MARGIN of it: read again, nothing new
    assert again["live"]["indicators"] == 2 and again["live"]["new_sightings"] == 0
    sql.rows(f"UPDATE hunt_postings SET last_seen = last_seen - {MARK_MARGIN.seconds * 2} "
             f"* interval '1 second'")  # the upload, two margins ago
    quiet = await match_now(db, config)
    assert quiet["live"]["indicators"] == 0
    released = await intel(settings, "release", names[0], "--note", "checked")
    assert released.returncode == 0, released.stderr
    assert (await match_now(db, config))["live"]["indicators"] == 1
