"""The servers of one role (`base_url` may list several): least-loaded choice, a capacity per
replica, and the cool-down of a replica that failed (failover: the request goes to another)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["REPLICA_COOLDOWN_CAP_S", "REPLICA_COOLDOWN_S", "Replica", "ReplicaDown", "Replicas"]

log = logging.getLogger(__name__)

REPLICA_COOLDOWN_S = 2.0
"""A failed replica is skipped for this long, doubled per consecutive failure..."""
REPLICA_COOLDOWN_CAP_S = 60.0
"""...up to this: a replica that comes back is used again within a minute."""


class ReplicaDown(Exception):
    """This replica did not answer usably (transport error, timeout, 408/429/5xx)."""


@dataclass(eq=False)
class Replica:
    """One server of a role, as the client sees it: its load, its failures, its probes."""

    url: str
    in_flight: int = 0
    failures: int = 0
    """Consecutive failures (reset by a success)."""
    down_until: float = 0.0
    last_used: int = 0
    probed: dict[str, str] = field(default_factory=dict)
    """Constraint kind -> "" (enforced) or why the probe failed."""
    probe_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class Replicas:
    """The servers of one role: least-loaded choice, per-replica capacity (a counting
    semaphore per replica, `capacity` slots each), cool-downs. Used on the event loop only.

    Waiters for a slot queue in FIFO order and a release wakes one of them, so a full client
    with thousands of requests waiting costs O(1) per completion (waking every waiter on every
    release would cost O(waiters))."""

    def __init__(self, urls: Sequence[str], capacity: int) -> None:
        self.replicas = [Replica(url) for url in urls]
        self.capacity = capacity
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._ticket = 0

    def live(self, now: float | None = None) -> list[Replica]:
        now = time.monotonic() if now is None else now
        return [r for r in self.replicas if r.down_until <= now]

    def any_live(self) -> bool:
        return bool(self.live())

    def _choose(self, avoid: Replica | None) -> Replica | None:
        now = time.monotonic()
        live = self.live(now)
        if avoid is not None and len(live) > 1:
            live = [r for r in live if r is not avoid]
        if not live:  # all cooling down: try the one that recovers first
            return min(self.replicas, key=lambda r: (r.down_until, r.in_flight))
        free = [r for r in live if r.in_flight < self.capacity]
        return min(free, key=lambda r: (r.in_flight, r.last_used)) if free else None

    async def acquire(self, avoid: Replica | None = None) -> Replica:
        """The live replica with the fewest requests in flight (waiting for a free slot);
        when every replica is cooling down, the one that comes back first. `avoid` (the one
        that just failed) is taken only when nothing else is left."""
        woken = False
        while True:
            chosen = self._choose(avoid)
            if chosen is not None:
                self._ticket += 1
                chosen.in_flight += 1
                chosen.last_used = self._ticket
                return chosen
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            # one woken but beaten to the slot keeps its place at the front
            self._waiters.appendleft(waiter) if woken else self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._wake(1)  # it was woken: pass the wake-up on
                raise  # a cancelled waiter left in the queue is skipped by `_wake`
            woken = True

    def give_back(self, replica: Replica) -> None:
        """Return a slot that was not used: no news about the replica."""
        replica.in_flight -= 1
        self._wake(1)

    def release(self, replica: Replica, failed: bool) -> None:
        """Return a slot after a request: a failure starts (or doubles) its cool-down, a
        success ends it."""
        replica.in_flight -= 1
        if failed:
            replica.failures += 1
            cooldown = min(REPLICA_COOLDOWN_CAP_S, REPLICA_COOLDOWN_S * 2 ** (replica.failures - 1))
            replica.down_until = time.monotonic() + cooldown
            log.info("replica %s set aside for %.1f s (%d failures in a row)", replica.url, cooldown, replica.failures)
            # its slots come back when the cool-down ends, without a release
            asyncio.get_running_loop().call_later(cooldown, self._wake, self.capacity)
        else:
            if replica.failures:
                log.info("replica %s answers again", replica.url)
            replica.failures = 0
            replica.down_until = 0.0
        self._wake(1)

    def _wake(self, n: int) -> None:
        """Wake the first `n` waiters still waiting."""
        while n > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                n -= 1
