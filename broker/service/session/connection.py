"""One client connection: the only place that touches a socket.

Theory of operation
-------------------

The read loop feeds bytes to a :class:`~magnetar.protocol.FrameDecoder` and hands each frame to the
command table (``handlers.HANDLERS``). The first frame must be CONNECT; anything else before it closes
the connection. Handlers are either plain functions, run inline in frame order (SEND, FLOW, ACK, PING,
REDELIVER...: the hot path, no task per frame), or coroutines, run as tasks tracked by the connection
(LOOKUP, PRODUCER, SUBSCRIBE, SEEK...), so a slow lookup never delays a SEND behind it.

Every handler is wrapped: a :class:`~.errors.BrokerServiceError` becomes ERROR (or SEND_ERROR for SEND)
with its protocol code; any other exception is logged with its traceback and answered UnknownError. A
malformed frame (the decoder raises ProtocolError) cannot be skipped, since framing is lost: the
connection answers nothing more and closes. No client input can stop the broker.

Writes are gathered during a turn of the event loop and leave in one ``transport.writelines`` (an entry
and its header stay separate buffers: a stored entry is never copied to be sent).
Dispatchers check :meth:`write_blocked` and await :meth:`drain` so a slow consumer's socket does not
buffer without bound. Publishing is flow-controlled by reading: while more than
``max_pending_publish_per_connection`` SENDs await storage, the read loop stops reading. A topic over its
publish rate limit pauses reading too (:meth:`Connection.pause_reading`, see ``throttle.py``): the read
loop stops before the next frame, even one already read, and the socket stops reading until every topic
that paused it resumes it.

Keep-alive: every ``keep_alive_interval_s`` the connection PINGs a quiet peer; a peer quiet for another
interval after that is closed.

Who is connected (``identity``: role, original principal, when the credentials expire) is decided by CONNECT
and kept fresh by AUTH_CHALLENGE / AUTH_RESPONSE (``auth.py``); on the TLS port, ``peer_certificate`` is the
client certificate the handshake verified.
"""

from __future__ import annotations

import asyncio
import enum
import inspect
import logging
import ssl
from typing import TYPE_CHECKING, Any, Optional

from magnetar.protocol import FrameDecoder, ProtocolError, command_body, encode_command, pb, wrap

from ..errors import BrokerServiceError, map_error
from .auth import ConnectionIdentity
from .consumer_endpoints import ConsumerEndpoints

if TYPE_CHECKING:
    from ..topics.consumer import Consumer
    from .producer import Producer
    from ..service import BrokerService

log = logging.getLogger("broker.service.session.connection")

_READ_CHUNK_BYTES = 256 * 1024
_WRITE_HIGH_WATER_BYTES = 4 * 1024 * 1024
_FRAME_OVERHEAD_BYTES = 10 * 1024
BaseCommand = pb.BaseCommand


class ConnectionState(enum.Enum):
    AWAITING_CONNECT = "awaiting-connect"
    CONNECTED = "connected"
    CLOSED = "closed"


class Connection(ConsumerEndpoints):
    """One client connection (see the module docstring); the sink of its consumers (``ConsumerEndpoints``)."""

    def __init__(self, service: "BrokerService", reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.service = service
        self.config = service.config
        self._reader = reader
        self._writer = writer
        self._transport = writer.transport
        self._transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER_BYTES)
        peer = writer.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        # a client certificate the TLS handshake verified (None on the plain port, or when none was presented)
        self.peer_certificate: Optional[dict] = writer.get_extra_info("peercert") or None
        self.identity = ConnectionIdentity()  # who is connected: set by CONNECT (session/auth.py)
        self.state = ConnectionState.AWAITING_CONNECT
        self.client_version = ""
        self.protocol_version = 0
        self.supports_topic_watchers = False  # negotiated in CONNECT (handlers.handle_connect)
        self.exposes_broker_entry_metadata = False  # MESSAGE frames keep the 0x0e02 section (handle_connect)
        self.producers: dict[int, "Producer"] = {}
        self.consumers: dict[int, "Consumer"] = {}
        # Creations in progress, so CLOSE_PRODUCER/CLOSE_CONSUMER racing a creation finds them.
        self.pending_producers: dict[int, asyncio.Task] = {}
        self.pending_consumers: dict[int, asyncio.Task] = {}
        self._decoder = FrameDecoder(frame_size_bytes_max=self.config.max_message_size_bytes + _FRAME_OVERHEAD_BYTES)
        self._tasks: set[asyncio.Task] = set()
        self._pending_publish = 0
        self._publish_room = asyncio.Event()
        self._publish_room.set()
        self._read_pausers: set[object] = set()  # publish rate limits holding reads (throttle.py)
        self._reading_allowed = asyncio.Event()
        self._reading_allowed.set()
        self._quiet_since_ping = False
        self._received = False
        self._keepalive_task: Optional[asyncio.Task] = None
        self._closed_event = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._out: list[bytes] = []
        self._flush_scheduled = False

    def __repr__(self) -> str:
        return f"Connection({self.remote_address}, {self.state.value})"

    @property
    def closed(self) -> bool:
        return self.state is ConnectionState.CLOSED

    # --------------------------------------------------------------------------------- writing

    # Everything written during one turn of the event loop leaves in one vectored write: receipts completed
    # together, MESSAGEs of one dispatch round and the commands between them cost one syscall, not one each.

    def write(self, data: bytes) -> None:
        if self.state is not ConnectionState.CLOSED:
            self._out.append(data)
            self._schedule_flush()

    def writelines(self, chunks: list[bytes]) -> None:
        if self.state is not ConnectionState.CLOSED:
            self._out.extend(chunks)
            self._schedule_flush()

    def write_now(self, chunks: list[bytes]) -> None:
        """Writes at once when nothing else waits for this turn's flush (else joins it, order kept): for
        receipts, whose client measures its publish latency by them and which would otherwise wait for the
        rest of the turn. Costs a system call each; the dispatch of MESSAGEs keeps to :meth:`writelines`."""
        if self.state is ConnectionState.CLOSED:
            return
        if self._out or self._flush_scheduled:
            self._out.extend(chunks)
            self._schedule_flush()
        elif not self._transport.is_closing():
            self._transport.writelines(chunks)

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and not self._transport.is_closing():
            self._transport.writelines(out)

    def send_command(self, inner) -> None:
        self.write(encode_command(wrap(inner)))

    def write_blocked(self) -> bool:
        return self._transport.get_write_buffer_size() > _WRITE_HIGH_WATER_BYTES

    async def drain(self) -> None:
        self._flush()
        try:
            await self._writer.drain()
        except (ConnectionError, RuntimeError):
            pass

    # --------------------------------------------------------------------------------- publish flow control

    def publish_started(self) -> None:
        self._pending_publish += 1
        if self._pending_publish >= self.config.max_pending_publish_per_connection:
            self._publish_room.clear()

    def publish_finished(self) -> None:
        self._pending_publish -= 1
        if self._pending_publish < self.config.max_pending_publish_per_connection // 2 + 1:
            self._publish_room.set()

    def pause_reading(self, owner: object) -> None:
        """Stops reading frames until ``owner`` (and every other owner) calls :meth:`resume_reading`."""
        if self.closed:
            return
        self._read_pausers.add(owner)
        self._reading_allowed.clear()
        try:
            self._transport.pause_reading()
        except (RuntimeError, AttributeError):  # closing, or a transport that cannot pause
            pass

    def resume_reading(self, owner: object) -> None:
        self._read_pausers.discard(owner)
        if self._read_pausers or self._reading_allowed.is_set():
            return
        self._reading_allowed.set()
        if not self._transport.is_closing():
            try:
                self._transport.resume_reading()
            except (RuntimeError, AttributeError):
                pass

    async def _wait_reading_allowed(self) -> None:
        await self._reading_allowed.wait()
        self._received = True  # held back by us, not quiet: the keep-alive must not count the pause

    # --------------------------------------------------------------------------------- registry

    def forget_producer(self, producer_id: int, producer: "Producer") -> None:
        if self.producers.get(producer_id) is producer:
            del self.producers[producer_id]

    def forget_consumer(self, consumer_id: int, consumer: "Consumer") -> None:
        if self.consumers.get(consumer_id) is consumer:
            del self.consumers[consumer_id]

    def spawn(self, coro, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --------------------------------------------------------------------------------- the read loop

    async def run(self) -> None:
        from .commands import HANDLERS  # the table imports this module's siblings

        self._keepalive_task = asyncio.get_running_loop().create_task(self._keepalive(),
                                                                      name=f"keep-alive {self.remote_address}")
        reader = self._reader
        try:
            while self.state is not ConnectionState.CLOSED:
                if not self._reading_allowed.is_set():
                    await self._wait_reading_allowed()
                data = await reader.read(_READ_CHUNK_BYTES)
                if not data:
                    break
                self._received = True
                try:
                    frames = self._decoder.feed(data)
                except ProtocolError as exc:
                    for frame in exc.frames:
                        self._handle(HANDLERS, frame)
                    log.warning("%s: malformed frame, closing the connection: %s", self.remote_address, exc)
                    break
                for frame in frames:
                    if not self._reading_allowed.is_set():
                        await self._wait_reading_allowed()
                    if self.state is ConnectionState.CLOSED:
                        break
                    self._handle(HANDLERS, frame)
                    if self.state is ConnectionState.CLOSED:
                        break
                if not self._publish_room.is_set():
                    await self._publish_room.wait()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):  # a peer gone, or broken TLS records
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: read loop failed", self.remote_address)
        finally:
            await self._cleanup()

    def _handle(self, handlers, frame) -> None:
        cmd = frame.command
        if self.state is ConnectionState.AWAITING_CONNECT and cmd.type != BaseCommand.CONNECT:
            log.warning("%s: %s before CONNECT; closing", self.remote_address, BaseCommand.Type.Name(cmd.type))
            self.close()
            return
        handler = handlers.get(cmd.type)
        if handler is None:
            self._unsupported(cmd)
            return
        try:
            result = handler(self, frame)
        except Exception as exc:
            self.answer_error(cmd, exc)
            return
        if inspect.iscoroutine(result):
            self.spawn(self._guard(cmd, result), f"{BaseCommand.Type.Name(cmd.type)} {self.remote_address}")

    async def _guard(self, cmd: pb.BaseCommand, coro) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.answer_error(cmd, exc)

    def _unsupported(self, cmd: pb.BaseCommand) -> None:
        name = BaseCommand.Type.Name(cmd.type) if cmd.type in BaseCommand.Type.values() else str(cmd.type)
        log.info("%s: unsupported command %s", self.remote_address, name)
        self.answer_error(cmd, BrokerServiceError(f"command {name} is not supported by this broker"))

    def answer_error(self, cmd: pb.BaseCommand, exc: BaseException) -> None:
        """Maps ``exc`` to the answer its command expects (ERROR / SEND_ERROR / response with an error)."""
        err = map_error(exc)
        if type(err) is BrokerServiceError and not isinstance(exc, BrokerServiceError):
            log.error("%s: %s handler failed", self.remote_address, BaseCommand.Type.Name(cmd.type), exc_info=exc)
        else:
            log.info("%s: %s refused: %s", self.remote_address, BaseCommand.Type.Name(cmd.type), err)
        if self.closed:
            return
        from .commands import error_response

        response = error_response(cmd, err)
        if response is not None:
            self.write(encode_command(response))

    # --------------------------------------------------------------------------------- keep-alive

    async def _keepalive(self) -> None:
        interval = self.config.keep_alive_interval_s
        ping = encode_command(wrap(pb.CommandPing()))
        while self.state is not ConnectionState.CLOSED:
            await asyncio.sleep(interval)
            if self._received:
                self._received = False
                self._quiet_since_ping = False
                continue
            if self.state is ConnectionState.AWAITING_CONNECT or self._quiet_since_ping:
                log.warning("%s: no traffic for %.0fs; closing", self.remote_address, 2 * interval)
                self.close()
                return
            self._quiet_since_ping = True
            self.write(ping)

    # --------------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Closes the socket; the read loop then cleans up (idempotent)."""
        if self.state is ConnectionState.CLOSED:
            return
        self._flush()  # what was written before the close still goes out (CLOSE_CONSUMER, errors...)
        self.state = ConnectionState.CLOSED
        self._transport.close()
        self._publish_room.set()
        self._reading_allowed.set()

    async def _cleanup(self) -> None:
        self.close()
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._keepalive_task is not None:
            await asyncio.gather(self._keepalive_task, return_exceptions=True)
        for producer in list(self.producers.values()):
            producer.closed = True
            producer.fail_pending_now()
            producer.topic.remove_producer(producer)
        self.producers.clear()
        for consumer in list(self.consumers.values()):
            consumer.subscription.remove_consumer(consumer)
        self.consumers.clear()
        self.service.connection_closed(self)
        self._closed_event.set()

    async def wait_closed(self) -> None:
        await self._closed_event.wait()


def request_id_of(cmd: pb.BaseCommand) -> Optional[int]:
    """The request id a command carries, if any (for error answers)."""
    try:
        body: Any = command_body(cmd)
    except (KeyError, AttributeError):
        return None
    if body.DESCRIPTOR.fields_by_name.get("request_id") is not None and body.HasField("request_id"):
        return body.request_id
    return None
