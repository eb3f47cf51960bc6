"""The bookie client's add stream when it must wait for room (``max_inflight_requests`` requests unanswered),
against a real bookie over its add port: every add is answered in order; and a bookie that dies while the stream
waits for room fails every pending add as soon as its connection ends, not at the add timeout."""

from __future__ import annotations

import os
import signal

from bookie.client.bookie_client import BookieClient
from bookie.client.wire import encode_entry
from magnetar.proto import bookie_pb2 as pb
from tests.kit.wait import wait_for_async

S = pb.Status


def _client(bookie, **kwargs) -> BookieClient:
    # One entry per request (any entry is over one byte) and one request in flight: every add after the first
    # waits for the answer before it.
    return BookieClient(bookie.bookie_id, bookie.address, add_address=bookie.add_address, max_request_bytes=1,
                        max_inflight_requests=1, **kwargs)


async def test_one_request_in_flight_answers_every_add_in_order(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="")
    client = _client(bookie)
    outcomes: list[tuple[int, int]] = []
    try:
        for e in range(300):
            client.add(encode_entry(5, e, e - 1, b"p%d" % e), e, lambda _b, eid, st, _m: outcomes.append((eid, st)))
        await wait_for_async(lambda: len(outcomes) == 300, 30, what="300 adds answered")
        assert outcomes == [(e, S.OK) for e in range(300)]
    finally:
        await client.close()


async def test_a_bookie_dying_while_the_stream_waits_for_room_fails_the_pending_adds_at_once(bookie_factory):
    (bookie,) = bookie_factory(1, zookeeper="")
    client = _client(bookie, add_timeout_s=120.0)
    outcomes: dict[int, int] = {}
    try:
        client.add(encode_entry(6, 0, -1, b"first"), 0, lambda _b, eid, st, _m: outcomes.__setitem__(eid, st))
        await wait_for_async(lambda: outcomes == {0: S.OK}, 30, what="the first add answered")
        os.kill(bookie.process.pid, signal.SIGSTOP)  # answers nothing from now on: the stream fills its one slot
        for e in range(1, 20):
            client.add(encode_entry(6, e, 0, b"later"), e, lambda _b, eid, st, _m: outcomes.__setitem__(eid, st))
        # The stream task sends entry 1 and waits for room behind it. The connection ends (SIGKILL reaches a
        # stopped process) long before the 120 s add timeout, and that is what must end the wait.
        bookie.process.kill()
        await wait_for_async(lambda: len(outcomes) == 20, 30, what="every pending add failed")
        assert {e: st for e, st in outcomes.items() if e} == {e: S.UNAVAILABLE for e in range(1, 20)}
    finally:
        await client.close()


async def test_an_answers_after_function_runs_once_after_all_its_entries(bookie_factory):
    """A callback may return a function to run once the whole answer was passed on (a write handle tells its
    owner once per answer, not once per entry): one call however many entries returned it, after all of them;
    the same when the stream fails them."""
    (bookie,) = bookie_factory(1, zookeeper="")
    client = BookieClient(bookie.bookie_id, bookie.address, add_address=bookie.add_address)
    outcomes: list[int] = []
    seen_by_after: list[int] = []

    def after() -> None:
        seen_by_after.append(len(outcomes))

    def callback(_b, eid, st, _m):
        outcomes.append(eid)
        return after

    try:
        for e in range(10):  # queued in one turn: the stream task sends them as one AddRequest
            client.add(encode_entry(7, e, e - 1, b"e%d" % e), e, callback)
        await wait_for_async(lambda: seen_by_after, 30, what="the answer passed on")
        assert outcomes == list(range(10)) and seen_by_after == [10]
        os.kill(bookie.process.pid, signal.SIGSTOP)
        for e in range(10, 15):
            client.add(encode_entry(7, e, 9, b"late"), e, callback)
        bookie.process.kill()  # the connection ends: the stream fails the five together
        await wait_for_async(lambda: len(seen_by_after) == 2, 30, what="the failed adds passed on")
        assert outcomes == list(range(15)) and seen_by_after == [10, 15]
    finally:
        await client.close()
