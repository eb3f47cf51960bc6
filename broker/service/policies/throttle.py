"""A topic's rate limits at work (the limiters themselves are pure: ``rate_limit.py``).

* Publish (the publish rate): every SEND is charged to the topic's limiter after it is accepted; when the
  limiter is exhausted the broker stops reading from the connections of the topic's producers
  (``Connection.pause_reading``: the read loop stops between frames and the socket is paused) until a slice
  of the period has refilled, as Pulsar throttles by turning auto-read off. Messages are never refused; a
  producer only sees its receipts slow down. ``publishRateLimitedTimes`` in the topic's stats counts the
  throttlings since the last stats window, as Pulsar's does; :attr:`publish_rate_limited_total` counts them
  since the topic loaded (Pulsar's ``pulsar.broker.topic.publish.rate.limit.count``).
* Dispatch (the topic's dispatch rate and the subscription dispatch rate): a dispatcher asks
  :meth:`dispatch_wait_s` before a round (it sleeps while any limiter is exhausted), reads at most
  :meth:`dispatch_allowance` messages, and charges what it sent (:meth:`dispatched`) to the subscription's
  limiter and to the topic's, which all the topic's subscriptions share: the topic limit bounds their sum.
  Each time a limiter holds a round back or cuts its read short it counts a throttling event for the
  subscription, by limit (``subscription`` or ``topic``) and dimension (messages or bytes): Pulsar's
  ``dispatchThrottled{Msg,Bytes}EventsBy{Subscription,Topic}Limit``.

Which rates apply (topic policy, else namespace policy for this broker's cluster, else broker default) is
``rate_policy.py``'s to say; :meth:`refresh` applies them to the loaded topic at once. Limits ``<= 0`` are off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Callable, Optional

from . import rate_policy
from .rate_limit import RateLimiter
from .stats import DispatchThrottleStats

if TYPE_CHECKING:
    from config_store.models import DispatchRate, PublishRate

    from .subjects import ReadPauser

log = logging.getLogger("broker.service.policies.throttle")


class TopicRateLimits:
    """The publish and dispatch limiters of one topic; see the module docstring."""

    def __init__(self, topic, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._topic = topic
        self._clock = clock
        self.publish: Optional[RateLimiter] = None
        self._publish_rate: Optional["PublishRate"] = None
        self.topic_dispatch: Optional[RateLimiter] = None
        self._topic_dispatch_rate: Optional["DispatchRate"] = None
        self._subscription_rate: Optional["DispatchRate"] = None
        self._subscriptions: dict[str, RateLimiter] = {}
        self._paused: set["ReadPauser"] = set()
        self._timer: Optional[asyncio.TimerHandle] = None
        self.publish_rate_limited_times = 0  # since the last stats window (Pulsar's publishRateLimitedTimes)
        self.publish_rate_limited_total = 0  # since the topic loaded
        self._throttle_events: dict[str, dict[tuple[str, str], int]] = {}  # subscription -> (limit, dim) -> events

    # --------------------------------------------------------------------------------- policies

    def refresh(self) -> None:
        """The topic's, its namespace's or the broker's rates may have changed (or the topic loaded): the limits
        follow at once."""
        self.apply(rate_policy.rates_of(self._topic))

    def apply(self, rates: rate_policy.Rates) -> None:
        """Runs with ``rates`` from now on (the tokens or debt of a limiter that stays on carry over)."""
        publish, topic_dispatch, sub_dispatch = rates
        now = self._clock()
        self._publish_rate = publish
        self.publish = _limiter(self.publish, publish.msgs_per_s if publish else -1,
                                publish.bytes_per_s if publish else -1, 1, now)
        if self.publish is None:
            self._resume_all()
        self._topic_dispatch_rate = topic_dispatch
        self.topic_dispatch = self._dispatch_limiter(self.topic_dispatch, topic_dispatch, now)
        self._subscription_rate = sub_dispatch
        for name, limiter in list(self._subscriptions.items()):
            retuned = self._dispatch_limiter(limiter, sub_dispatch, now)
            if retuned is None:
                del self._subscriptions[name]
        self._wake_dispatchers()

    def _dispatch_limiter(self, limiter: Optional[RateLimiter], rate: Optional["DispatchRate"],
                          now: float) -> Optional[RateLimiter]:
        if rate is None:
            return None
        msgs, size = rate.msgs_per_period, rate.bytes_per_period
        if rate.relative_to_publish_rate:  # Pulsar: the configured rate on top of the current publish rate
            period = rate.period_s
            msgs = msgs + round(self._topic.msg_in.rate() * period) if msgs > 0 else msgs
            size = size + round(self._topic.bytes_in.rate() * period) if size > 0 else size
        return _limiter(limiter, msgs, size, rate.period_s, now)

    def tick(self) -> None:
        """A stats window closed: publish-relative dispatch limits follow the new publish rate."""
        self.publish_rate_limited_times = 0
        now = self._clock()
        if self._topic_dispatch_rate is not None and self._topic_dispatch_rate.relative_to_publish_rate:
            self.topic_dispatch = self._dispatch_limiter(self.topic_dispatch, self._topic_dispatch_rate, now)
        if self._subscription_rate is not None and self._subscription_rate.relative_to_publish_rate:
            for limiter in self._subscriptions.values():
                self._dispatch_limiter(limiter, self._subscription_rate, now)

    # --------------------------------------------------------------------------------- publish

    def on_published(self, msgs: int, size_bytes: int) -> None:
        """Charges one accepted SEND; throttles the producers' connections once the limit is exhausted."""
        limiter = self.publish
        if limiter is None:
            return
        now = self._clock()
        limiter.consume(msgs, size_bytes, now)
        if limiter.exhausted(now):
            self._pause_producers()
            if self._timer is None:
                self.publish_rate_limited_times += 1
                self.publish_rate_limited_total += 1
                self._timer = asyncio.get_running_loop().call_later(limiter.wait_s(now), self._on_timer)

    def _pause_producers(self) -> None:
        for producer in list(self._topic.producers.values()):
            conn = producer.connection
            if conn not in self._paused and not conn.closed:
                self._paused.add(conn)
                conn.pause_reading(self)

    def _on_timer(self) -> None:
        self._timer = None
        limiter = self.publish
        now = self._clock()
        if limiter is not None and limiter.exhausted(now):  # frames read before the pause ran it into debt
            self._timer = asyncio.get_running_loop().call_later(limiter.wait_s(now), self._on_timer)
            return
        self._resume_all()

    def _resume_all(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        paused, self._paused = self._paused, set()
        for conn in paused:
            conn.resume_reading(self)

    @property
    def publish_throttled(self) -> bool:
        return bool(self._paused)

    # --------------------------------------------------------------------------------- dispatch

    @property
    def dispatch_limited(self) -> bool:
        """Whether any dispatch limit is set (dispatchers skip the limiters' bookkeeping when not)."""
        return self.topic_dispatch is not None or self._subscription_rate is not None

    def _limiters_for(self, subscription: str) -> list[tuple[str, RateLimiter]]:
        """``(limit, limiter)`` pairs that bound the subscription; the limit is ``topic`` or ``subscription``."""
        out = [("topic", self.topic_dispatch)] if self.topic_dispatch is not None else []
        limiter = self._subscriptions.get(subscription)
        if limiter is None and self._subscription_rate is not None:
            limiter = self._dispatch_limiter(None, self._subscription_rate, self._clock())
            if limiter is not None:
                self._subscriptions[subscription] = limiter
        if limiter is not None:
            out.append(("subscription", limiter))
        return out

    def dispatch_wait_s(self, subscription: str) -> float:
        """Seconds the subscription's dispatcher must wait before reading (0: it may read now); an exhausted
        limiter counts a throttling event per exhausted dimension."""
        now = self._clock()
        wait_s = 0.0
        for limit, limiter in self._limiters_for(subscription):
            if not limiter.exhausted(now):
                continue
            wait_s = max(wait_s, limiter.wait_s(now))
            if limiter.msgs is not None and limiter.msgs.exhausted(now):
                self._count_throttled(subscription, limit, "Msg")
            if limiter.bytes is not None and limiter.bytes.exhausted(now):
                self._count_throttled(subscription, limit, "Bytes")
        return wait_s

    def dispatch_allowance(self, subscription: str, wanted: int) -> int:
        """How many of ``wanted`` messages the subscription may be sent now (at least 1 of them: charges are made
        after the fact); a message limit that cuts the read short counts a throttling event."""
        now = self._clock()
        allowed = wanted
        for limit, limiter in self._limiters_for(subscription):
            available = limiter.available_msgs(now)
            if available is not None and available < wanted:
                self._count_throttled(subscription, limit, "Msg")
                allowed = min(allowed, available)
        return min(wanted, max(allowed, 1))

    def dispatched(self, subscription: str, msgs: int, size_bytes: int) -> None:
        now = self._clock()
        for _, limiter in self._limiters_for(subscription):
            limiter.consume(msgs, size_bytes, now)

    def _count_throttled(self, subscription: str, limit: str, dimension: str) -> None:
        events = self._throttle_events.setdefault(subscription, {})
        key = (limit, dimension)
        events[key] = events.get(key, 0) + 1

    def throttle_stats(self, subscription: str) -> DispatchThrottleStats:
        """The subscription's dispatch throttling events since it (or the topic) loaded; the broker-wide limit
        is not served here, so its events are always 0."""
        events = self._throttle_events.get(subscription, {})
        return DispatchThrottleStats(
            msg_events_by_subscription_limit=events.get(("subscription", "Msg"), 0),
            bytes_events_by_subscription_limit=events.get(("subscription", "Bytes"), 0),
            msg_events_by_topic_limit=events.get(("topic", "Msg"), 0),
            bytes_events_by_topic_limit=events.get(("topic", "Bytes"), 0))

    def forget(self, subscription: str) -> None:
        self._subscriptions.pop(subscription, None)
        self._throttle_events.pop(subscription, None)

    def _wake_dispatchers(self) -> None:
        """A sleeping throttled dispatcher re-checks its limits (they may have been lifted)."""
        for sub in list(getattr(self._topic, "subscriptions", {}).values()):
            dispatcher = getattr(sub, "dispatcher", None)
            if dispatcher is not None:
                dispatcher.wake()

    # --------------------------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """The topic is going away: connections it paused read again (they may serve other topics)."""
        self._resume_all()


def _limiter(limiter: Optional[RateLimiter], msgs: int, size_bytes: int, period_s: float,
             now: float) -> Optional[RateLimiter]:
    """``limiter`` retuned to the new limits, a new one, or None when both limits are off."""
    if msgs <= 0 and size_bytes <= 0:
        return None
    if limiter is None:
        return RateLimiter(msgs_per_period=msgs, bytes_per_period=size_bytes, period_s=period_s, now_s=now)
    limiter.set_rate(msgs_per_period=msgs, bytes_per_period=size_bytes, period_s=period_s, now_s=now)
    return limiter
