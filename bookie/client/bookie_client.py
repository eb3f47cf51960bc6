"""The client of one bookie, shared by every ledger handle of a :class:`LedgerClient`.

Adds are pipelined: ledger handles queue framed entries with :meth:`BookieClient.add` (no await), a sender
task packs everything queued into one AddRequest (up to ``max_request_bytes``) and writes it on a single
long-lived add stream: a TCP connection to the bookie's add port when it registered one (``add_address``;
one grpc.aio stream write costs several times the CPU of a transport write, see docs/latency.md), else a
gRPC AddEntries stream (:mod:`bookie.client.add_streams`). A reader task matches responses to requests in
order (the bookie answers in the order it received) and calls each entry's callback. When the stream
breaks, or the oldest request waits longer than ``add_timeout_s``, every queued and in-flight entry is
failed with UNAVAILABLE: the ledger handle turns that into an ensemble change. The next add opens a new
stream.

Reads, fencing, LAC and deletes are unary or server-streaming calls with a deadline; gRPC errors are mapped
to ``bookie.errors`` types here, at the boundary.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import grpc
from grpc import aio

from bookie.errors import BookieError, BookieUnavailableError, InvalidRequestError, status_to_error
from magnetar.proto import bookie_pb2

from .add_streams import GrpcAddStream, TcpAddStream

log = logging.getLogger(__name__)

Status = bookie_pb2.Status

# callback(bookie_id, entry_id, status, message) -- called on the event loop. It may return a function, which is
# called (once, however many entries returned it) after every entry of the same answer was passed on.
AddCallback = Callable[[str, int, int, str], Optional[Callable[[], None]]]


def _report(bookie_id: str, outcomes) -> None:
    """Passes on each (callback, entry_id, status, message) outcome, then runs the after-functions they
    returned, each once and in the order first returned."""
    afters: dict = {}  # insertion-ordered, each once
    for callback, entry_id, status, message in outcomes:
        after = callback(bookie_id, entry_id, status, message)
        if after is not None:
            afters[after] = None
    for after in afters:
        try:
            after()
        except Exception:  # noqa: BLE001 - an owner's bug must not end the add stream
            log.exception("an add callback's after-function failed")


_SERVICE = "/magnetar.bookie.v1.BookieService/"


def channel_options(*, keepalive_interval_ms: int, keepalive_timeout_ms: int) -> list[tuple[str, int]]:
    """The gRPC arguments of a bookie channel.

    Keepalive (gRPC's ``doc/keepalive.md``): the channel pings the bookie every ``keepalive_interval_ms``,
    with or without a call in flight and however long no data moved (an idle AddEntries stream must notice
    a dead bookie before an add times out on it), and drops the connection when a ping is not acknowledged
    within ``keepalive_timeout_ms``. A gRPC server counts every ping that comes sooner than it allows as a
    strike and, after two, answers GOAWAY ``too_many_pings``; a bookie allows pings down to half its
    ``grpc_keepalive_interval_ms`` (see ``bookie.server.server_options``), so this interval must be at
    least that: the same value on both sides is the intended setting.

    Each client owns its connection (a local subchannel pool): gRPC would otherwise share one connection
    among channels with the same target and arguments, and one client's traffic would hide another's
    keepalive behaviour (and one client's close or failure would be another's).
    """
    return [
        ("grpc.max_send_message_length", 64 * 1024 * 1024),
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ("grpc.keepalive_time_ms", keepalive_interval_ms),
        ("grpc.keepalive_timeout_ms", keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 2_000),
        ("grpc.use_local_subchannel_pool", 1),
    ]


class ClientState(enum.Enum):
    IDLE = "idle"
    STREAMING = "streaming"
    CLOSED = "closed"


@dataclass(slots=True)
class _QueuedAdd:
    framed: bytes
    entry_id: int
    callback: AddCallback


@dataclass(slots=True)
class _InFlight:
    request_id: int
    sent_at: float
    adds: list[_QueuedAdd]


def map_rpc_error(bookie_id: str, err: grpc.RpcError) -> BookieError:
    """A gRPC failure as a typed Magnetar error naming the bookie."""
    code = err.code() if hasattr(err, "code") else None
    detail = err.details() if hasattr(err, "details") else str(err)
    text = f"bookie {bookie_id}: {code.name if code else 'error'}: {detail}"
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidRequestError(text)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        # The bookie says why in the detail (fenced / read-only); keep the text, mark it non-retriable.
        return BookieError(text)
    return BookieUnavailableError(text)


class BookieClient:
    """One bookie's channel, its pipelined add stream, and its read/fence/LAC calls.

    ``add_address`` (the bookie's add port, ``host:port``) carries the adds over TCP; "" keeps them on gRPC.
    """

    def __init__(
        self,
        bookie_id: str,
        address: str,
        *,
        add_address: str = "",
        add_timeout_s: float = 10.0,
        read_timeout_s: float = 5.0,
        max_request_bytes: int = 4 * 1024 * 1024,
        max_inflight_requests: int = 64,
        keepalive_interval_ms: int = 10_000,
        keepalive_timeout_ms: int = 5_000,
    ) -> None:
        self.bookie_id = bookie_id
        self.address = address
        self.add_address = add_address
        self.keepalive_interval_ms = keepalive_interval_ms
        self.keepalive_timeout_ms = keepalive_timeout_ms
        self.add_timeout_s = add_timeout_s
        self.read_timeout_s = read_timeout_s
        self.max_request_bytes = max_request_bytes
        self.max_inflight_requests = max_inflight_requests
        self.state = ClientState.IDLE
        self._channel = aio.insecure_channel(address, options=channel_options(
            keepalive_interval_ms=keepalive_interval_ms, keepalive_timeout_ms=keepalive_timeout_ms))
        self._add_call = self._channel.stream_stream(
            _SERVICE + "AddEntries", request_serializer=None, response_deserializer=bookie_pb2.AddResponse.FromString
        )
        self._read_call = self._channel.unary_stream(
            _SERVICE + "ReadEntries",
            request_serializer=bookie_pb2.ReadRequest.SerializeToString,
            response_deserializer=bookie_pb2.ReadResponse.FromString,
        )
        self._lac_call = self._channel.unary_unary(
            _SERVICE + "ReadLastAddConfirmed",
            request_serializer=bookie_pb2.ReadLacRequest.SerializeToString,
            response_deserializer=bookie_pb2.ReadLacResponse.FromString,
        )
        self._write_lac_call = self._channel.unary_unary(
            _SERVICE + "WriteLastAddConfirmed",
            request_serializer=bookie_pb2.WriteLacRequest.SerializeToString,
            response_deserializer=bookie_pb2.ReadLacResponse.FromString,
        )
        self._fence_call = self._channel.unary_unary(
            _SERVICE + "FenceLedger",
            request_serializer=bookie_pb2.FenceRequest.SerializeToString,
            response_deserializer=bookie_pb2.ReadLacResponse.FromString,
        )
        self._delete_call = self._channel.unary_unary(
            _SERVICE + "DeleteLedger",
            request_serializer=bookie_pb2.DeleteLedgerRequest.SerializeToString,
            response_deserializer=bookie_pb2.DeleteLedgerResponse.FromString,
        )
        self._info_call = self._channel.unary_unary(
            _SERVICE + "GetBookieInfo",
            request_serializer=bookie_pb2.BookieInfoRequest.SerializeToString,
            response_deserializer=bookie_pb2.BookieInfoResponse.FromString,
        )
        self._queues: dict[bool, list[_QueuedAdd]] = {False: [], True: []}
        self._queued_since: Optional[float] = None
        self._inflight: collections.deque[_InFlight] = collections.deque()
        self._request_ids = itertools.count(1)
        # The stream task's wait (for an add, for room in flight, or for its reader or watchdog to end): one
        # plain future a wait, set by _poke. (An asyncio.Event waited on beside the two tasks with asyncio.wait
        # cost a task and three done callbacks a wait, nearly one a request on an idle pipe.)
        self._waiter: Optional[asyncio.Future] = None
        self._room_wanted = False
        self._task: Optional[asyncio.Task] = None

    # -- pipelined adds ---------------------------------------------------------------------------------

    def add(self, framed_entry: bytes, entry_id: int, callback: AddCallback, *, recovery: bool = False) -> None:
        """Queues one framed entry (see ``wire.encode_entry``); ``callback`` reports its outcome later."""
        if self.state is ClientState.CLOSED:
            _report(self.bookie_id, [(callback, entry_id, Status.UNAVAILABLE, "bookie client closed")])
            return
        queue = self._queues[recovery]
        if not queue and not self._queues[not recovery]:
            self._queued_since = time.monotonic()
        queue.append(_QueuedAdd(framed_entry, entry_id, callback))
        if self._task is None or self._task.done():
            self.state = ClientState.STREAMING
            self._task = asyncio.get_running_loop().create_task(self._run_stream(), name=f"bookie-add-{self.bookie_id}")
        self._poke()

    def _take_batch(self) -> tuple[bool, list[_QueuedAdd]]:
        for recovery in (False, True):
            queue = self._queues[recovery]
            if not queue:
                continue
            size = 0
            cut = 0
            for cut, item in enumerate(queue):
                size += len(item.framed)
                if size > self.max_request_bytes and cut > 0:
                    break
            else:
                cut = len(queue)
            batch = queue[:cut]
            del queue[:cut]
            return recovery, batch
        return False, []

    def _open_add_stream(self):
        if self.add_address:
            return TcpAddStream(self.bookie_id, self.add_address, connect_timeout_s=self.add_timeout_s,
                                keepalive_idle_s=self.keepalive_interval_ms / 1000,
                                keepalive_timeout_s=self.keepalive_timeout_ms / 1000)
        return GrpcAddStream(self.bookie_id, self._add_call)

    async def _run_stream(self) -> None:
        stream = self._open_add_stream()
        loop = asyncio.get_running_loop()
        # The watchdog runs while connecting too: a connection attempt that hangs is an add that times out.
        watchdog = loop.create_task(self._watch_timeouts())
        watchdog.add_done_callback(self._poke)
        opening = loop.create_task(stream.open())
        reader: Optional[asyncio.Task] = None
        error: Optional[str] = None
        try:
            await asyncio.wait({opening, watchdog}, return_when=asyncio.FIRST_COMPLETED)
            if not opening.done():
                return  # the watchdog ended first: it says why below
            opening.result()
            reader = loop.create_task(self._read_responses(stream))
            reader.add_done_callback(self._poke)
            while True:
                if not self._queues[False] and not self._queues[True]:
                    if not await self._wait(reader, watchdog):
                        break
                    continue
                if len(self._inflight) >= self.max_inflight_requests:
                    self._room_wanted = True
                    if not await self._wait(reader, watchdog):
                        break
                    continue
                recovery, batch = self._take_batch()
                if not (self._queues[False] or self._queues[True]):
                    self._queued_since = None
                request_id = next(self._request_ids)
                self._inflight.append(_InFlight(request_id, time.monotonic(), batch))
                await stream.write(request_id, [a.framed for a in batch], recovery=recovery)
        except asyncio.CancelledError:
            error = "bookie client closed"
            raise
        except grpc.RpcError as err:
            error = str(map_rpc_error(self.bookie_id, err))
        except BookieError as err:
            error = str(err)
        except Exception as err:  # noqa: BLE001 - any failure of the stream fails its entries, never hangs them
            error = f"bookie {self.bookie_id}: add stream failed: {err!r}"
        finally:
            if error is None:
                error = self._stream_error(reader, watchdog)
            tasks = [t for t in (opening, reader, watchdog) if t is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            stream.close()
            self._fail_everything(error)
            if self.state is not ClientState.CLOSED:
                self.state = ClientState.IDLE

    def _poke(self, *_: object) -> None:
        """Wakes the stream task if it waits: an add was queued, a request was answered while it waited for
        room, or its reader or watchdog ended (their done callback). A wake finding nothing new waits again."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, reader: asyncio.Task, watchdog: asyncio.Task) -> bool:
        """Waits until poked; False once the stream's reader or watchdog ended (then the stream is over)."""
        if reader.done() or watchdog.done():
            return False
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
            self._room_wanted = False
        return not (reader.done() or watchdog.done())

    def _stream_error(self, reader: Optional[asyncio.Task], watchdog: asyncio.Task) -> str:
        for task in (watchdog, reader):
            if task is None:
                continue
            if task.done() and not task.cancelled():
                exc = task.exception()
                if exc is not None:
                    if isinstance(exc, grpc.RpcError):
                        return str(map_rpc_error(self.bookie_id, exc))
                    return str(exc)
                return f"bookie {self.bookie_id}: add stream ended"
        return f"bookie {self.bookie_id}: add stream ended"

    async def _read_responses(self, stream) -> None:
        await stream.deliver(self._settle_message)

    def _settle_message(self, response) -> None:
        self._settle(response)
        for later in response.more:  # answers to the following requests, ready at the same time
            self._settle(later)

    def _settle(self, response) -> None:
        """Completes the oldest request in flight with ``response`` (answers come in request order)."""
        if not self._inflight:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: answer to a request never sent")
        sent = self._inflight[0]
        if response.request_id != sent.request_id:  # (left in flight: the stream's end fails it with the rest)
            raise BookieUnavailableError(
                f"bookie {self.bookie_id}: answered request {response.request_id}, expected {sent.request_id}"
            )
        self._inflight.popleft()
        if self._room_wanted:
            self._poke()
        status, message = response.status, response.message
        if status == Status.PARTIAL and len(response.entry_status) == len(sent.adds):
            statuses = response.entry_status
        else:
            statuses = itertools.repeat(status)
        _report(self.bookie_id, ((a.callback, a.entry_id, s, message) for a, s in zip(sent.adds, statuses)))

    async def _watch_timeouts(self) -> None:
        period = min(0.25, self.add_timeout_s / 4)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            oldest = self._inflight[0].sent_at if self._inflight else self._queued_since
            if oldest is not None and now - oldest > self.add_timeout_s:
                raise BookieUnavailableError(
                    f"bookie {self.bookie_id}: add timed out after {self.add_timeout_s:.1f} s"
                )

    def _fail_everything(self, message: str) -> None:
        failed = [a for sent in self._inflight for a in sent.adds]
        self._inflight.clear()
        for recovery in (False, True):
            failed.extend(self._queues[recovery])
            self._queues[recovery] = []
        self._queued_since = None
        if failed:
            log.warning("%s: failing %d pending adds", message, len(failed))
        _report(self.bookie_id, [(a.callback, a.entry_id, Status.UNAVAILABLE, message) for a in failed])

    # -- unary calls --------------------------------------------------------------------------------------

    async def read_entries(
        self,
        ledger_id: int,
        entry_ids: Optional[Iterable[int]] = None,
        *,
        first: Optional[int] = None,
        last: Optional[int] = None,
        fence: bool = False,
        timeout_s: Optional[float] = None,
    ) -> list[bookie_pb2.ReadEntry]:
        """Reads entries (explicit ascending ids, or an inclusive range); missing ones come back with
        NO_SUCH_ENTRY. Raises a mapped BookieError on a gRPC failure or deadline."""
        request = bookie_pb2.ReadRequest(ledger_id=ledger_id, fence=fence)
        if entry_ids is not None:
            request.entry_ids.extend(entry_ids)
        else:
            request.first_entry_id = first
            request.last_entry_id = last
        out: list[bookie_pb2.ReadEntry] = []
        try:
            async with asyncio.timeout(timeout_s or self.read_timeout_s):
                call = self._read_call(request)
                async for response in call:
                    out.extend(response.entries)
        except TimeoutError as err:
            raise BookieUnavailableError(f"bookie {self.bookie_id}: read timed out") from err
        except grpc.RpcError as err:
            raise map_rpc_error(self.bookie_id, err) from err
        return out

    async def read_lac(self, ledger_id: int) -> bookie_pb2.ReadLacResponse:
        return await self._unary(self._lac_call, bookie_pb2.ReadLacRequest(ledger_id=ledger_id))

    async def write_lac(self, ledger_id: int, lac: int) -> bookie_pb2.ReadLacResponse:
        """Sends the writer's explicit LAC; the bookie answers its LAC after the update."""
        request = bookie_pb2.WriteLacRequest(ledger_id=ledger_id, last_add_confirmed=lac)
        return await self._unary(self._write_lac_call, request)

    async def fence(self, ledger_id: int) -> bookie_pb2.ReadLacResponse:
        return await self._unary(self._fence_call, bookie_pb2.FenceRequest(ledger_id=ledger_id))

    async def delete_ledger(self, ledger_id: int) -> bool:
        response = await self._unary(self._delete_call, bookie_pb2.DeleteLedgerRequest(ledger_id=ledger_id))
        return response.existed

    async def info(self, *, timeout_s: Optional[float] = None) -> bookie_pb2.BookieInfoResponse:
        return await self._unary(self._info_call, bookie_pb2.BookieInfoRequest(), timeout_s=timeout_s)

    async def _unary(self, multicallable, request, *, timeout_s: Optional[float] = None):
        try:
            return await multicallable(request, timeout=timeout_s or self.read_timeout_s)
        except grpc.RpcError as err:
            raise map_rpc_error(self.bookie_id, err) from err

    # -- lifecycle ----------------------------------------------------------------------------------------

    async def close(self) -> None:
        if self.state is ClientState.CLOSED:
            return
        self.state = ClientState.CLOSED
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self._fail_everything(f"bookie {self.bookie_id}: client closed")
        await self._channel.close()


def entry_error(bookie_id: str, status: int, message: str) -> BookieError:
    """The typed error for a non-OK per-entry status."""
    return status_to_error(status, f"bookie {bookie_id}: {message or bookie_pb2.Status.Name(status)}")
