"""Push replay after a Redis failover: a promoted replica lacks the writes its master
acknowledged and had not yet sent it, so the links a job queued just before the failure
are pushed again, and its leases are set right."""

import logging
import time
from collections import deque

from crawler.context import JobContext
from master.tasks import Task

logger = logging.getLogger(__name__)

# Seconds before a Redis failure whose pushed links are pushed again once it answers.
REPLAY_SECONDS = 10.0


class PushReplay:
    def __init__(self, context: JobContext) -> None:
        self.context = context
        # (when, task, recrawl) of the links this job queued in the last REPLAY_SECONDS
        self.recent: deque[tuple[float, Task, bool]] = deque()

    def remember(self, pushed: list[tuple[Task, bool]]) -> None:
        """Keep the tasks just queued (and whether each is a recrawl) for REPLAY_SECONDS."""
        now = time.monotonic()
        self.recent.extend((now, task, recrawl) for task, recrawl in pushed)
        while self.recent and self.recent[0][0] < now - REPLAY_SECONDS:
            self.recent.popleft()

    def after_failure(self, failed_at: float) -> None:
        """Once Redis answers again after an error: the links this job queued just before
        are pushed again (those the pools have are refused there as pushed within the
        dedupe window), and leases Redis holds for this job that it had finished or
        never got are reported again or released."""
        replay = [(task, recrawl) for when, task, recrawl in self.recent
                  if when >= failed_at - REPLAY_SECONDS]
        codes = self.context.frontier.push_links([task for task, _ in replay],
                                                 [recrawl for _, recrawl in replay])
        tracker = self.context.tracker
        # Taken and not yet reported: still open, or reported next round.
        held = {member for member, _, _ in tracker.outcomes}
        again, released = tracker.reconcile(held)
        logger.warning("after a Redis failure: %d of the %d links queued in the %.0f s "
                       "before it were lost and queued again; %d leases held for this job "
                       "were reported again (their finish was lost), %d released to the "
                       "pools", codes.count("q"), len(replay), REPLAY_SECONDS, again, released)
