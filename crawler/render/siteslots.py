"""The render slots, shared fairly among sites: a freed slot goes to the site that has
waited longest for its turn, not to the oldest waiter. A site with a long queue of
renders (a hostile site's sampled pages, each held to the quiet cap) then delays another
site's renders by one render each at most, as Scrapy's download slots keep sites apart.
No site holds every slot (``per_site``: all but one, by default): renders that each hold
a slot for the quiet cap or the render timeout (a page that never goes quiet, one that
drips) would otherwise fill them all while no other site waited, and the next site's
render (a sample whose template's pages wait on its verdict) would wait for one to end.
A crawl of one site keeps all but one slot busy."""

import asyncio
import contextlib
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterator


class SiteSlots:
    """``size`` slots, at most ``per_site`` of them held by one site; waiters queue per
    site, and sites take turns (round robin)."""

    def __init__(self, size: int, per_site: int | None = None) -> None:
        self.free = size
        self.per_site = per_site or max(1, size - 1)
        self.holding: Counter[str] = Counter()
        self.waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @contextlib.asynccontextmanager
    async def held(self, site: str) -> AsyncIterator[None]:
        """A slot for a render of ``site``'s, held while the block runs."""
        await self._acquire(site)
        try:
            yield
        finally:
            self._release(site)

    async def _acquire(self, site: str) -> None:
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(site, deque()).append(turn)
        self._grant()
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():    # granted as it was cancelled
                self._release(site)
            raise

    def _release(self, site: str) -> None:
        self.free += 1
        self.holding[site] -= 1
        if not self.holding[site]:
            del self.holding[site]
        self._grant()

    def _grant(self) -> None:
        """Free slots to the waiting sites under their share, in turn: each to the next
        such site's oldest waiter, and that site goes to the back."""
        while self.free:
            site = next((name for name in self.waiting
                         if self.holding[name] < self.per_site), None)
            if site is None:
                return
            queue = self.waiting[site]
            turn = queue.popleft()
            if queue:
                self.waiting.move_to_end(site)
            else:
                del self.waiting[site]
            if not turn.done():             # a cancelled waiter's turn passes on
                turn.set_result(None)
                self.free -= 1
                self.holding[site] += 1
