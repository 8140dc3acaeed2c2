"""The render slots, shared fairly among sites: a freed slot goes to the site that has
waited longest for its turn, not to the oldest waiter. A site with a long queue of
renders (a hostile site's sampled pages, each held to the quiet cap) then delays another
site's renders by one render each at most, as Scrapy's download slots keep sites apart."""

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import AsyncIterator


class SiteSlots:
    """``size`` slots; waiters queue per site, and sites take turns (round robin)."""

    def __init__(self, size: int) -> None:
        self.free = size
        self.waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @contextlib.asynccontextmanager
    async def held(self, site: str) -> AsyncIterator[None]:
        """A slot for a render of ``site``'s, held while the block runs."""
        await self._acquire(site)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, site: str) -> None:
        if self.free and not self.waiting:
            self.free -= 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(site, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():    # granted as it was cancelled
                self._release()
            raise

    def _release(self) -> None:
        """The freed slot to the next site's oldest waiter; that site goes to the back."""
        while self.waiting:
            site, queue = next(iter(self.waiting.items()))
            turn = queue.popleft()
            if queue:
                self.waiting.move_to_end(site)
            else:
                del self.waiting[site]
            if not turn.done():             # a cancelled waiter's turn passes on
                turn.set_result(None)
                return
        self.free += 1
