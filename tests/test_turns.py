"""Fair turns for uploads in progress (server/ingest/turns.py): the router served the fewest
records lately goes first, so a Sybil fleet flooding at full speed does not put an honest
router behind each of its uploads; a waiter that leaves never holds the turn."""

from __future__ import annotations

import asyncio

from server.ingest.turns import FairTurns, Served


async def _settle() -> None:
    """Every callback the last step made ready has run: turns are handed by futures, a few
    loop iterations deep, with no timer between (a sleep of some milliseconds instead
    lets a loaded machine's stall decide)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def _queue_behind_holder(turns: FairTurns, served: Served, macs: list[str]
                               ) -> list[str]:
    """Each mac asks for the turn while another holds it; the order they get it in."""
    order: list[str] = []
    release = asyncio.Event()

    async def holder() -> None:
        async with turns.turn("02:00:00:00:00:ff"):
            await release.wait()

    async def one(mac: str) -> None:
        async with turns.turn(mac):
            order.append(mac)
            served.count(mac, 200)

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    waiters = []
    for mac in macs:
        waiters.append(asyncio.create_task(one(mac)))
        await asyncio.sleep(0)  # in this order
    release.set()
    await asyncio.gather(held, *waiters)
    return order


async def test_the_router_served_least_lately_goes_first():
    served = Served()
    turns = FairTurns(served)
    flooders = [f"02:5a:00:00:00:{n:02x}" for n in range(5)]
    for mac in flooders:
        served.count(mac, 10_000)
    honest = "02:59:00:00:00:01"
    served.count(honest, 44)
    assert await _queue_behind_holder(turns, served, flooders + [honest]) == [honest] + flooders


async def test_routers_served_alike_go_in_arrival_order_and_the_window_forgets():
    served = Served(window_seconds=0.05)
    turns = FairTurns(served)
    macs = [f"02:00:00:00:00:{n:02x}" for n in range(4)]
    served.count(macs[3], 1_000_000)
    await asyncio.sleep(0.1)  # the window passed: what it served is forgotten
    assert await _queue_behind_holder(turns, served, macs) == macs


async def test_a_waiter_cancelled_never_holds_the_turn():
    turns = FairTurns(Served())
    release = asyncio.Event()
    got: list[str] = []

    async def holder() -> None:
        async with turns.turn("a"):
            await release.wait()

    async def one(mac: str) -> None:
        async with turns.turn(mac):
            got.append(mac)

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    leaving = asyncio.create_task(one("leaving"))
    staying = asyncio.create_task(one("staying"))
    await asyncio.sleep(0)
    assert turns.waiting == 2
    leaving.cancel()
    release.set()
    await asyncio.gather(held, staying)
    assert got == ["staying"] and leaving.cancelled()
    async with turns.turn("after"):  # free again: taken at once
        got.append("after")
    assert got == ["staying", "after"] and turns.waiting == 0


async def test_a_waiter_cancelled_as_it_is_handed_the_turn_passes_it_on():
    turns = FairTurns(Served())
    release = asyncio.Event()
    got: list[str] = []
    waiters: dict[str, asyncio.Task] = {}

    async def holder() -> None:
        async with turns.turn("a"):
            await release.wait()
        waiters["first"].cancel()  # handed the turn a moment ago, not yet running

    async def one(mac: str) -> None:
        async with turns.turn(mac):
            got.append(mac)

    held = asyncio.create_task(holder())
    await asyncio.sleep(0)
    for mac in ("first", "second"):
        waiters[mac] = asyncio.create_task(one(mac))
        await asyncio.sleep(0)
    release.set()
    await asyncio.gather(held, waiters["second"])
    assert got == ["second"] and waiters["first"].cancelled()
    async with turns.turn("after"):
        got.append("after")
    assert got == ["second", "after"]


async def test_at_most_at_once_hold_a_turn_and_the_least_served_gets_the_next():
    served = Served()
    turns = FairTurns(served, at_once=2)
    release = asyncio.Event()
    holding: list[str] = []
    order: list[str] = []

    async def hold(mac: str) -> None:
        async with turns.turn(mac):
            holding.append(mac)
            await release.wait()

    async def one(mac: str) -> None:
        async with turns.turn(mac):
            order.append(mac)

    held = [asyncio.create_task(hold(mac)) for mac in ("h1", "h2")]
    await asyncio.sleep(0)
    assert holding == ["h1", "h2"]
    served.count("flooder", 5_000)
    waiters = [asyncio.create_task(one(mac)) for mac in ("flooder", "honest")]
    await asyncio.sleep(0)
    assert turns.waiting == 2 and order == []
    release.set()
    await asyncio.gather(*held, *waiters)
    assert order == ["honest", "flooder"]



async def test_a_turn_held_past_its_overtime_is_handed_on_once():
    """A holder stuck past `overtime_seconds` (a statement waiting on another upload's
    locks) stops counting: the next waiter goes on while it still holds, and when it ends
    its turn is not handed on a second time."""
    turns = FairTurns(Served(), at_once=1, overtime_seconds=0.2)
    stuck, release = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def hold(mac: str, until: asyncio.Event) -> None:
        async with turns.turn(mac):
            order.append(mac)
            await until.wait()
        order.append(f"{mac} ended")

    clock = asyncio.get_running_loop().time
    held = asyncio.create_task(hold("stuck", stuck))
    await asyncio.sleep(0)
    started = clock()
    await asyncio.wait_for(hold("next", _set()), 30)  # waits for the overtime, not for ever
    assert order == ["stuck", "next", "next ended"] and clock() - started > 0.19
    holding = asyncio.create_task(hold("holding", release))  # the one turn, in its time
    await asyncio.sleep(0)
    stuck.set()
    await held  # ends without handing the turn on again: "holding" still has it alone
    waiting = asyncio.create_task(hold("waiting", _set()))
    await _settle()
    assert order[-2:] == ["holding", "stuck ended"] and turns.waiting == 1
    release.set()
    await asyncio.gather(holding, waiting)
    assert order[-2:] == ["waiting", "waiting ended"] and turns.waiting == 0


def _set() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


async def test_a_router_served_more_still_gets_a_turn_within_its_patience():
    """Cheap MACs arriving without end, each served less than an honest router that uploads
    more, went before it for ever (a hostile review: no turn in 3 s); a waiter out of
    patience goes first."""
    served = Served()
    turns = FairTurns(served, at_once=1, patience_seconds=0.3)
    served.count("honest", 5_000)
    got: list[str] = []
    waiting_when_honest_went: list[int] = []
    cheap: list[asyncio.Task] = []

    async def one(mac: str) -> None:
        async with turns.turn(mac):
            got.append(mac)
            if mac == "honest":
                waiting_when_honest_went.append(turns.waiting)
            elif "honest" not in got and len(cheap) < 200:  # the next arrives meanwhile:
                cheap.append(asyncio.create_task(one(f"cheap-{len(cheap)}")))  # never free
            await asyncio.sleep(0.02)

    cheap.append(asyncio.create_task(one("cheap-0")))
    await _settle()
    started = asyncio.get_running_loop().time()
    await asyncio.wait_for(one("honest"), 30)
    waited = asyncio.get_running_loop().time() - started
    assert waiting_when_honest_went[0] >= 1  # it went before a cheap MAC: by its patience
    assert waited > 0.29, waited
    # each statement lasts 20 ms or more: at most 15 ran within the patience, one more
    # ran when it ran out, and one held the turn when the honest router arrived
    assert got.index("honest") <= 17, got.index("honest")
    await asyncio.gather(*cheap)
    assert turns.waiting == 0


async def _holding(turns: FairTurns, mac: str, holding: list[str],
                   release: asyncio.Event) -> None:
    async with turns.turn(mac):
        holding.append(mac)
        await release.wait()
    holding.remove(mac)


async def test_an_under_served_router_takes_the_spare_turn_at_once():
    """Flooders hold every turn and more wait: a router served under half the average
    lately goes at once, on the one spare turn; a second such router, and a flooder served
    a little less than the others, wait for a turn."""
    served = Served()
    turns = FairTurns(served, at_once=2, spare=True)
    for n in range(6):
        served.count(f"flooder{n}", 6_000 - 100 * n)
    served.count("honest", 700)
    served.count("quiet", 500)
    holding: list[str] = []
    release, later = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(_holding(turns, mac, holding, release))
             for mac in ("flooder0", "flooder1", "flooder5")]
    await asyncio.sleep(0)
    assert holding == ["flooder0", "flooder1"] and turns.waiting == 1  # flooder5: 5,500
    tasks.append(asyncio.create_task(_holding(turns, "honest", holding, later)))
    await asyncio.sleep(0)
    assert holding == ["flooder0", "flooder1", "honest"]  # the spare, nobody waited for
    tasks.append(asyncio.create_task(_holding(turns, "quiet", holding, release)))
    await asyncio.sleep(0)
    assert "quiet" not in holding and turns.waiting == 2  # the spare is taken
    release.set()
    await _settle()
    assert holding == ["honest"] and turns.waiting == 0  # "quiet" went first, then flooder5
    later.set()
    await asyncio.gather(*tasks)
    async with turns.turn("flooder0"), turns.turn("flooder1"):  # all free again
        async with turns.turn("fresh"):  # never served: the spare
            assert turns.waiting == 0


async def test_without_a_spare_or_a_share_to_be_under_no_extra_turn():
    """No spare (the pool of one connection): an under-served router waits like the
    others. Nobody served lately, or all alike: nobody is under-served."""
    served = Served()
    served.count("flooder", 6_000)
    for turns in (FairTurns(served, at_once=1),
                  FairTurns(Served(), at_once=1, spare=True)):
        holding: list[str] = []
        release = asyncio.Event()
        tasks = [asyncio.create_task(_holding(turns, mac, holding, release))
                 for mac in ("flooder", "honest")]
        await asyncio.sleep(0)
        assert holding == ["flooder"] and turns.waiting == 1
        release.set()
        await asyncio.gather(*tasks)
    alike = Served()
    for mac in ("a", "b"):
        alike.count(mac, 200)
    assert not alike.under_served("a") and not alike.under_served("b")
    assert alike.under_served("fresh")


async def test_a_fleet_of_fresh_macs_shares_the_one_spare_turn():
    """Hostile: 50 MACs never served (each under-served) arrive while a flooder holds the
    only turn: they go through the spare one at a time while it holds, never more than
    two uploads hold a turn at once, and every one gets its turn."""
    served = Served()
    served.count("flooder", 6_000)
    turns = FairTurns(served, at_once=1, spare=True)
    holders, most, beside_the_flooder = 0, 0, 0
    release, all_through = asyncio.Event(), asyncio.Event()

    async def one(mac: str, hold_until: asyncio.Event | None = None) -> None:
        nonlocal holders, most, beside_the_flooder
        async with turns.turn(mac):
            holders += 1
            most = max(most, holders)
            if hold_until is None:
                beside_the_flooder += not release.is_set()
                await asyncio.sleep(0.001)
                served.count(mac, 200)
                if beside_the_flooder == 50:
                    all_through.set()
            else:
                await hold_until.wait()
            holders -= 1

    flooder = asyncio.create_task(one("flooder", release))
    await asyncio.sleep(0)
    fresh = [asyncio.create_task(one(f"02:5b:00:00:00:{n:02x}")) for n in range(50)]
    await asyncio.wait_for(all_through.wait(), 30)  # while the flooder still holds
    assert beside_the_flooder == 50 and most == 2  # all through the spare, one at a time
    release.set()
    await asyncio.gather(flooder, *fresh)
    assert turns.waiting == 0 and holders == 0
    async with turns.turn("flooder"):  # the turn and the spare both free again
        async with turns.turn("02:5b:00:00:01:00"):  # another fresh one
            assert holders == 0 and turns.waiting == 0


async def test_the_spare_goes_to_a_waiter_that_may_take_it():
    """The spare given back goes to the first waiter under-served now that may take it:
    not to one whose body is still arriving (spare_allowed=False), nor to one served much
    since it began to wait; the spare is never taken by one not allowed it."""
    served = Served()
    for n in range(4):
        served.count(f"flooder{n}", 6_000)
    turns = FairTurns(served, at_once=1, spare=True)
    holding: list[str] = []
    release, spare_release = asyncio.Event(), asyncio.Event()
    tasks = [asyncio.create_task(_holding(turns, "flooder0", holding, release)),
             asyncio.create_task(_holding(turns, "first", holding, spare_release))]
    await asyncio.sleep(0)
    assert holding == ["flooder0", "first"]  # "first": never served, the spare

    async def waiting(mac: str, spare_allowed: bool) -> None:
        async with turns.turn(mac, spare_allowed=spare_allowed):
            holding.append(mac)
            await release.wait()
        holding.remove(mac)

    for mac, allowed in (("arriving", False), ("grown", True), ("sparse", True)):
        tasks.append(asyncio.create_task(waiting(mac, allowed)))
        await asyncio.sleep(0)
    served.count("grown", 50_000)  # served much since it began to wait
    served.count("sparse", 10)
    assert turns.waiting == 3
    spare_release.set()
    await _settle()
    assert holding == ["flooder0", "sparse"] and turns.waiting == 2
    release.set()
    await asyncio.gather(*tasks)
    assert holding == [] and turns.waiting == 0
