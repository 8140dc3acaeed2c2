"""The render slots are shared by sites in turn, not by arrival."""

import asyncio

from crawler.render.siteslots import SiteSlots


async def _order(slots: SiteSlots, arrivals: list[str]) -> list[str]:
    """The order in which renders of ``arrivals``' sites get a slot, while one of
    site ``a``'s holds the only one."""
    granted: list[str] = []
    release = asyncio.Event()

    async def render(name: str, hold: asyncio.Event | None = None) -> None:
        async with slots.held(name[0]):
            granted.append(name)
            if hold is not None:
                await hold.wait()

    first = asyncio.ensure_future(render("a0", release))
    await asyncio.sleep(0)
    waiters = []
    for name in arrivals:
        waiters.append(asyncio.ensure_future(render(name)))
        await asyncio.sleep(0)
    release.set()
    await asyncio.gather(first, *waiters)
    return granted[1:]


def test_a_site_with_a_long_queue_lets_another_in_at_its_next_turn() -> None:
    order = asyncio.run(_order(SiteSlots(1), ["a1", "a2", "a3", "b1", "a4", "b2"]))
    assert order == ["a1", "b1", "a2", "b2", "a3", "a4"]


def test_a_free_slot_is_taken_at_once_and_a_cancelled_waiter_passes_its_turn() -> None:
    async def run() -> list[str]:
        slots = SiteSlots(1)
        granted: list[str] = []

        async def render(name: str, hold: float) -> None:
            async with slots.held(name[0]):
                granted.append(name)
                await asyncio.sleep(hold)

        first = asyncio.ensure_future(render("a0", 0.05))
        await asyncio.sleep(0)
        gone = asyncio.ensure_future(render("b0", 0))
        last = asyncio.ensure_future(render("c0", 0))
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.gather(first, last, return_exceptions=True)
        assert slots.free == 1 and not slots.waiting
        return granted

    assert asyncio.run(run()) == ["a0", "c0"]


def test_no_site_holds_every_slot_so_another_site_gets_one_at_once() -> None:
    """Renders that each hold a slot long (a page that never goes quiet) cannot fill
    every slot while no other site waits: the next site's render starts at once."""
    async def run() -> tuple[list[str], list[str], int]:
        slots = SiteSlots(4)
        release = asyncio.Event()
        granted: list[str] = []

        async def render(name: str) -> None:
            async with slots.held(name[0]):
                granted.append(name)
                await release.wait()

        hostile = [asyncio.ensure_future(render(f"a{n}")) for n in range(4)]
        await asyncio.sleep(0)
        before = list(granted)
        other = asyncio.ensure_future(render("b0"))
        await asyncio.sleep(0)
        during, free = list(granted), slots.free
        release.set()
        await asyncio.gather(*hostile, other)
        assert slots.free == 4 and not slots.waiting and not slots.holding
        return before, during, free

    before, during, free = asyncio.run(run())
    assert before == ["a0", "a1", "a2"]           # all but one of 4; a3 waits
    assert during == ["a0", "a1", "a2", "b0"] and free == 0
