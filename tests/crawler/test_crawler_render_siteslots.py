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
