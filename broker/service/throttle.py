"""A topic's rate limits at work (the limiters themselves are pure: ``rate_limit.py``).

* Publish (namespace ``publishMaxMessageRate``): every SEND is charged to the topic's limiter after it
  is accepted; when the limiter is exhausted the broker stops reading from the connections of the topic's
  producers (``Connection.pause_reading``: the read loop stops between frames and the socket is paused)
  until a slice of the period has refilled, as Pulsar throttles by turning auto-read off. Messages are
  never refused; a producer only sees its receipts slow down. ``publishRateLimitedTimes`` in the topic's
  stats counts the throttlings since the last stats window, as Pulsar's does.
* Dispatch (``topicDispatchRate``, ``subscriptionDispatchRate``): a dispatcher asks
  :meth:`dispatch_wait_s` before a round (it sleeps while any limiter is exhausted), reads at most
  :meth:`dispatch_allowance` messages, and charges what it sent (:meth:`dispatched`) to the subscription's
  limiter and to the topic's, which all the topic's subscriptions share: the topic limit bounds their sum.

Policies are read for this broker's cluster (Pulsar keeps each rate per cluster) and changes apply at
once to the loaded topic (:meth:`apply`). Limits ``<= 0`` are off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Callable, Optional

from .rate_limit import RateLimiter, min_allowance

if TYPE_CHECKING:
    from config_store.models import DispatchRate, Policies, PublishRate

    from .connection import Connection

log = logging.getLogger("broker.service.throttle")


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
        self._paused: set["Connection"] = set()
        self._timer: Optional[asyncio.TimerHandle] = None
        self.publish_rate_limited_times = 0  # since the last stats window (Pulsar's publishRateLimitedTimes)

    # --------------------------------------------------------------------------------- policies

    def apply(self, policies: Optional["Policies"], cluster: str) -> None:
        """The namespace's policies changed (or the topic loaded): limits follow at once."""
        publish = _for_cluster(policies, "publish_max_message_rate", cluster)
        topic_dispatch = _for_cluster(policies, "topic_dispatch_rate", cluster)
        sub_dispatch = _for_cluster(policies, "subscription_dispatch_rate", cluster)
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

    def _limiters_for(self, subscription: str) -> list[RateLimiter]:
        out = [self.topic_dispatch] if self.topic_dispatch is not None else []
        limiter = self._subscriptions.get(subscription)
        if limiter is None and self._subscription_rate is not None:
            limiter = self._dispatch_limiter(None, self._subscription_rate, self._clock())
            if limiter is not None:
                self._subscriptions[subscription] = limiter
        if limiter is not None:
            out.append(limiter)
        return out

    def dispatch_wait_s(self, subscription: str) -> float:
        """Seconds the subscription's dispatcher must wait before reading (0: it may read now)."""
        now = self._clock()
        return max((lim.wait_s(now) for lim in self._limiters_for(subscription) if lim.exhausted(now)), default=0.0)

    def dispatch_allowance(self, subscription: str) -> Optional[int]:
        """Messages the subscription may be sent now (None: no message limit applies)."""
        return min_allowance(self._limiters_for(subscription), self._clock())

    def dispatched(self, subscription: str, msgs: int, size_bytes: int) -> None:
        now = self._clock()
        for limiter in self._limiters_for(subscription):
            limiter.consume(msgs, size_bytes, now)

    def forget(self, subscription: str) -> None:
        self._subscriptions.pop(subscription, None)

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


def _for_cluster(policies: Optional["Policies"], attribute: str, cluster: str):
    """This cluster's entry of a per-cluster rate map (None when unset, or when the policies lack the map)."""
    rates = getattr(policies, attribute, None) or {}
    return rates.get(cluster)


def _limiter(limiter: Optional[RateLimiter], msgs: int, size_bytes: int, period_s: float,
             now: float) -> Optional[RateLimiter]:
    """``limiter`` retuned to the new limits, a new one, or None when both limits are off."""
    if msgs <= 0 and size_bytes <= 0:
        return None
    if limiter is None:
        return RateLimiter(msgs_per_period=msgs, bytes_per_period=size_bytes, period_s=period_s, now_s=now)
    limiter.set_rate(msgs_per_period=msgs, bytes_per_period=size_bytes, period_s=period_s, now_s=now)
    return limiter
