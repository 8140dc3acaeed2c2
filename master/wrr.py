"""Weighted round robin (thesis 4.2.1.1), the dispatcher's choice of job.

The classic interleaved algorithm: walk the jobs in order; a job is chosen
when its weight is at least the current weight; after a full pass the
current weight drops by the weights' greatest common divisor, and when it
falls to zero or below it restarts at the largest weight. Over one cycle
each job is chosen weight/gcd times, spread out rather than in runs.
"""

from collections.abc import Mapping
from functools import reduce
from math import gcd


class WeightedRoundRobin:
    def __init__(self) -> None:
        self.position = -1
        self.current = 0

    def sequence(self, weights: Mapping[str, float], count: int) -> list[str]:
        """The next ``count`` choices for ``{job: weight}`` (weights > 0, whole numbers).

        Does not advance; call ``advance`` with how many were used.
        """
        state = (self.position, self.current)
        chosen = self._walk(weights, count)
        self.position, self.current = state
        return chosen

    def advance(self, weights: Mapping[str, float], used: int) -> None:
        self._walk(weights, used)

    def _walk(self, weights: Mapping[str, float], count: int) -> list[str]:
        jobs = sorted(weights)
        values = [max(1, int(weights[job])) for job in jobs]
        step, top = reduce(gcd, values), max(values)
        chosen: list[str] = []
        while len(chosen) < count:
            self.position = (self.position + 1) % len(jobs)
            if self.position == 0:
                self.current -= step
                if self.current <= 0:
                    self.current = top
            if values[self.position] >= self.current:
                chosen.append(jobs[self.position])
        return chosen
