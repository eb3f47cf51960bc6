"""What every dispatcher shares: the consumer list, a read loop task, and the entry filter.

Theory of operation
-------------------

A dispatcher moves entries from its subscription's cursor to consumers. It runs one task, the *read loop*:
each round asks the concrete dispatcher (``_round``) to read what its consumers have permits for and send
it. A round returns what the loop should do next:

* ``PROGRESS``: something was read; run another round at once;
* ``WAIT_ENTRIES``: caught up with the cursor; sleep until a new entry is written or an event arrives;
* ``WAIT_EVENT``: nobody can receive (no permits, blocked, stuck replays); sleep until an event arrives.

Events are FLOW, acknowledgements that unblock a consumer or move the mark-delete position, consumers
joining or leaving, redelivery requests and rewinds; each calls :meth:`wake`. The wake flag is cleared
at the start of a round, so an event during a round is never lost.

Rewinds (a new active consumer, redeliver-all, seek) bump ``generation``; a round whose read was in
flight while the generation changed throws its entries away and rewinds again, because the cursor's read
position may have been moved by the read completing after the rewind.

End of topic: when the topic is terminated, a round that finds nothing to do (``WAIT_ENTRIES`` or
``WAIT_EVENT``) checks whether the subscription has no backlog left (everything acknowledged, as Pulsar
requires) and then tells each consumer, once per consumer and not before its first FLOW
(``_check_end_of_topic``; a consumer joining later is told on the idle round its FLOW wakes).
``Consumer.reached_end`` sends REACHED_END_OF_TOPIC only to clients that handle it: pulsar-client's C++ core
and the Go client close their connection on it, which made them reconnect and be told again every 100 ms.
Termination itself wakes every dispatcher.

Rate limits (``throttle.py``): before a round the loop asks the topic's limits how long this
subscription must wait (its own dispatch rate, and the topic's, shared by all its subscriptions) and
sleeps that long (an event cuts the sleep short, to re-check: a limit may have been lifted); a round reads
no more messages than the limits allow now, and what is sent is charged to them (``message_items``,
which every dispatcher calls to send).

Filtering: entries already acknowledged (the cursor says so, or an acknowledgement is queued for it) are
skipped; internal markers (``marker_type`` set) are acknowledged on the spot and never delivered. A
replicated subscription first keeps the snapshots that SNAPSHOT markers carry (``on_snapshot_marker``).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import TYPE_CHECKING, Optional

from broker.managed_ledger.api import Entry, Position
from magnetar.protocol.metadata import MARKER_REPLICATED_SUBSCRIPTION_SNAPSHOT

from ..entries import EntryInfo, entry_info, entry_payload, int_to_ack_set

if TYPE_CHECKING:
    from ..consumer import Consumer
    from ..subscription import Subscription

log = logging.getLogger("broker.service.topics.dispatch.base")

_ERROR_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)


class Next(enum.Enum):
    PROGRESS = 1
    WAIT_ENTRIES = 2
    WAIT_EVENT = 3


class Dispatcher:
    """Base class; see the module docstring."""

    def __init__(self, subscription: "Subscription") -> None:
        self.subscription = subscription
        self.cursor = subscription.cursor
        self.config = subscription.config
        self.consumers: list["Consumer"] = []
        self.generation = 0
        self._wakeup = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self._closed = False
        self._errors = 0
        self.end_of_topic_reached = 0  # consumers found at the end of the terminated topic (stats, tests)
        self.end_of_topic_sent = 0  # ... of which were sent REACHED_END_OF_TOPIC (stats, tests)
        self.log_prefix = f"[{subscription.topic.name}][{subscription.name}]"

    # --------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"dispatch {self.log_prefix}")

    async def close(self) -> None:
        """Stops the read loop (idempotent)."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def wake(self) -> None:
        self._wakeup.set()

    # --------------------------------------------------------------------------------- consumers

    def add_consumer(self, consumer: "Consumer") -> None:
        self.consumers.append(consumer)
        self.start()
        self.wake()

    def remove_consumer(self, consumer: "Consumer") -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.wake()

    def consumer_flow(self, consumer: "Consumer") -> None:
        self.wake()

    def redeliver(self, consumer: "Consumer", positions: Optional[list[Position]]) -> None:
        raise NotImplementedError

    def on_acked(self, positions: list[Position]) -> None:
        """Entries were acknowledged individually (hook for per-position bookkeeping)."""

    def after_reset(self) -> None:
        """The cursor was reset (seek): forget whatever was queued for replay."""
        self.generation += 1
        self.wake()

    def active_consumer_name(self) -> Optional[str]:
        return None

    def delayed_messages(self) -> int:
        """Entries held for delayed delivery (stats ``msgDelayed``); only Shared and Key_Shared hold any."""
        return 0

    # --------------------------------------------------------------------------------- the loop

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            self._wakeup.clear()
            throttled_s = self._rate_limit_wait_s()
            if throttled_s > 0:
                try:
                    await asyncio.wait_for(self._wakeup.wait(), throttled_s)
                except TimeoutError:
                    pass
                continue
            try:
                nxt = await self._round()
                self._errors = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = _ERROR_BACKOFF_S[min(self._errors, len(_ERROR_BACKOFF_S) - 1)]
                self._errors += 1
                log.warning("%s dispatch round failed (%s: %s); retrying in %.2fs", self.log_prefix,
                            type(exc).__name__, exc, delay, exc_info=self._errors == 1)
                try:
                    await asyncio.wait_for(self._wakeup.wait(), delay)
                except TimeoutError:
                    pass
                continue
            if nxt is Next.PROGRESS:
                await asyncio.sleep(0)  # let the connection's reader and writers run between rounds
                continue
            self._check_end_of_topic()
            await self._wait(entries=nxt is Next.WAIT_ENTRIES, loop=loop)

    async def _wait(self, *, entries: bool, loop: asyncio.AbstractEventLoop) -> None:
        if self._wakeup.is_set():
            return
        if not entries:
            await self._wakeup.wait()
            return
        waiters = {loop.create_task(self._wakeup.wait()), loop.create_task(self.cursor.wait_for_entries())}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def _round(self) -> Next:
        raise NotImplementedError

    def _check_end_of_topic(self) -> None:
        if not self.consumers or not self.subscription.topic.ml.terminated:
            return
        try:
            if self.cursor.backlog_entries() > 0:
                return
        except Exception as exc:  # a closed cursor: the subscription is going away
            log.debug("%s end-of-topic check: %s", self.log_prefix, exc)
            return
        for consumer in list(self.consumers):
            if consumer.reached_end():
                self.end_of_topic_reached += 1
                self.end_of_topic_sent += consumer.end_of_topic_notified
                log.info("%s %s reached the end of the terminated topic (%s)", self.log_prefix, consumer,
                         "notified" if consumer.end_of_topic_notified else
                         f"not notified: {consumer.connection.client_version!r} does not handle it")

    # --------------------------------------------------------------------------------- helpers

    def _rate_limit_wait_s(self) -> float:
        limits = self._dispatch_limits()
        return limits.dispatch_wait_s(self.subscription.name) if limits is not None else 0.0

    def _dispatch_limits(self):
        """The topic's rate limits when a dispatch limit is set, else None (the hot path skips them)."""
        limits = getattr(self.subscription.topic, "rate_limits", None)
        return limits if limits is not None and limits.dispatch_limited else None

    async def _read_new(self, max_entries: int) -> Optional[list[Entry]]:
        """Reads from the cursor; None when a rewind happened meanwhile (entries dropped)."""
        generation = self.generation
        entries = await self.cursor.read_entries(max_entries)
        if generation != self.generation:
            self.rewind_cursor()
            return None
        return entries

    def rewind_cursor(self) -> None:
        self.subscription.rewind_cursor()

    def filter_entries(self, entries: list[Entry]) -> list[tuple[Entry, EntryInfo]]:
        """Drops acknowledged entries and acknowledges markers; returns the rest with their info."""
        sub = self.subscription
        out = []
        for entry in entries:
            if sub.is_acked(entry.position):
                continue
            info = entry_info(entry.data)
            if info.marker:
                if sub.replicated and info.metadata.marker_type == MARKER_REPLICATED_SUBSCRIPTION_SNAPSHOT:
                    sub.on_snapshot_marker(entry.position, info.metadata, entry_payload(entry.data))
                sub.ack_marker(entry.position)
                continue
            out.append((entry, info))
        return out

    def message_items(self, consumer: "Consumer", batch: list[tuple[Entry, EntryInfo]]):
        """(entry, messages, redelivery count, ack set) for ``Consumer.send_entries``; what they carry is
        charged to the dispatch rate limits (every dispatcher sends what this returns at once)."""
        sub = self.subscription
        counts = sub.redelivery_counts
        batch_acks = sub.batch_acks
        items = []
        for entry, info in batch:
            pos = entry.position
            remaining = batch_acks.get(pos)
            if remaining is not None:
                ack_set = int_to_ack_set(remaining)
                messages = bin(remaining).count("1")
            else:
                ack_set = ()
                messages = info.num_messages
            items.append((entry, messages, counts.get(pos, 0), ack_set))
        limits = self._dispatch_limits()
        if limits is not None and items:
            limits.dispatched(sub.name, sum(i[1] for i in items), sum(len(i[0].data) for i in items))
        return items

    def estimate_entries(self, permits: int, avg_messages_per_entry: float) -> int:
        """Entries to read for ``permits`` messages (no more than the rate limits allow now), given the
        average batch size seen so far."""
        limits = self._dispatch_limits()
        if limits is not None:
            permits = limits.dispatch_allowance(self.subscription.name, permits)
        avg = max(avg_messages_per_entry, 1.0)
        return max(1, min(self.config.dispatcher_max_read_batch, int(permits / avg) or 1))
