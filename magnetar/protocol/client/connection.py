"""One connection to a broker (or a proxy): the only module of the client that moves bytes.

Theory of operation
-------------------

:meth:`Connection.start` opens TCP (TLS with an ``ssl.SSLContext``), sends CONNECT and reads until
CONNECTED (answering AUTH_CHALLENGE and PING on the way; an ERROR there is the handshake's failure). Then
three tasks run until the connection closes:

* the **read loop** feeds whatever the socket returns to a :class:`FrameDecoder` and dispatches each
  frame (:mod:`.dispatch`): responses by ``request_id`` to the future of :meth:`request`; SEND_RECEIPT,
  SEND_ERROR and CLOSE_PRODUCER to the producer registered under the ``producer_id``; MESSAGE,
  CLOSE_CONSUMER, REACHED_END_OF_TOPIC and ACTIVE_CONSUMER_CHANGE to the consumer under the
  ``consumer_id``; WATCH_TOPIC_UPDATE to the topic-list watcher under the ``watcher_id``; PING is answered
  with PONG;
* the **write loop** takes every buffer queued since its last turn and hands them to the transport in one
  ``writelines`` (so the SENDs a producer queues in one event-loop turn become one ``send`` system call),
  then waits for the transport to drain below its high-water mark;
* the **keep-alive loop** sends PING after ``keep_alive_interval_s`` without receiving anything and closes
  the connection when another interval passes in silence.

Request ids come from this connection's own counter. Producer and consumer ids are chosen by the caller
(the :class:`~magnetar.protocol.client.Client` numbers them client-wide, as pulsar-client does).

Closing (by :meth:`close`, by the peer, by a protocol error or a keep-alive timeout) is one path,
:meth:`_abort`: it closes the transport, fails every outstanding request with
:class:`ConnectionClosedError`, tells every registered producer, consumer (which reconnect on their own) and
topic-list watcher (which ends) and every ``on_close`` callback, and cancels the tasks; :meth:`close` also awaits them.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import ssl
import time
from collections.abc import Callable

from google.protobuf.message import Message as ProtoMessage

from magnetar.protocol import FRAME_SIZE_BYTES_MAX_DEFAULT, Frame, FrameDecoder, ProtocolError, encode_command, pb, wrap

from .auth import Auth
from .commands import CLIENT_VERSION, PROTOCOL_VERSION, connect_command
from .dispatch import ConsumerHandler, FrameDispatcher, ProducerHandler, TopicListWatchHandler
from .errors import (
    AlreadyClosedError,
    ClientError,
    ConnectError,
    ConnectionClosedError,
    RequestTimeoutError,
    error_from_server,
)
from .urls import ServiceUrl, parse_service_url

__all__ = ["Connection", "ConnectionState"]

log = logging.getLogger(__name__)

T = pb.BaseCommand
READ_SIZE_BYTES = 256 * 1024
_STREAM_LIMIT_BYTES = 4 * 1024 * 1024
_FRAMING_OVERHEAD_BYTES = 10 * 1024


class ConnectionState(enum.Enum):
    INIT = "init"
    CONNECTING = "connecting"
    READY = "ready"
    CLOSED = "closed"


class Connection(FrameDispatcher):
    """A connection to one broker; see the module docstring.

    Args:
        url: where to open the socket (``pulsar://host:port``; for several hosts, each is tried in order).
        logical_url: the broker this connection is *for*; differs from ``url`` when going through a proxy,
            and is then sent as CONNECT's ``proxy_to_broker_url``. Defaults to ``url``.
        ssl_context: TLS context (``pulsar+ssl://`` without one uses ``ssl.create_default_context()``).
        auth: credentials for CONNECT.
        connect_timeout_s: for TCP/TLS plus the CONNECT handshake.
        operation_timeout_s: default timeout of :meth:`request`.
        keep_alive_interval_s: PING after this long without receiving anything.
        client_version: announced in CONNECT.
        topic_watchers: announce topic-list watchers in CONNECT (``topic_list.TopicListWatch``); whether the
            broker serves them is ``broker_supports_topic_watchers`` once connected.
        original_principal: sent in CONNECT by a proxy: the role of the client it acts for (``auth`` being
            the proxy's own credentials).
        original_auth: the client's own credentials, forwarded with ``original_principal`` (a proxy with
            ``forward_authorization_credentials``) as ``original_auth_method`` and ``original_auth_data``.
    """

    def __init__(
        self,
        url: str | ServiceUrl,
        *,
        logical_url: str | ServiceUrl | None = None,
        ssl_context: ssl.SSLContext | None = None,
        auth: Auth | None = None,
        connect_timeout_s: float = 10.0,
        operation_timeout_s: float = 30.0,
        keep_alive_interval_s: float = 30.0,
        client_version: str = CLIENT_VERSION,
        protocol_version: int = PROTOCOL_VERSION,
        topic_watchers: bool = False,
        original_principal: str | None = None,
        original_auth: Auth | None = None,
    ) -> None:
        self.url = parse_service_url(url)
        self.logical_url = parse_service_url(logical_url) if logical_url is not None else self.url
        if self.url.tls and ssl_context is None:
            ssl_context = ssl.create_default_context()
        self.ssl_context = ssl_context if self.url.tls else None
        self.auth = auth
        self.connect_timeout_s = connect_timeout_s
        self.operation_timeout_s = operation_timeout_s
        self.keep_alive_interval_s = keep_alive_interval_s
        self.client_version = client_version
        self.protocol_version = protocol_version
        self.topic_watchers = topic_watchers
        self.original_principal = original_principal
        self.original_auth = original_auth
        self.broker_supports_topic_watchers = False
        self.state = ConnectionState.INIT
        self.server_version = ""
        self.server_protocol_version = 0
        self.max_message_size_bytes = FRAME_SIZE_BYTES_MAX_DEFAULT - _FRAMING_OVERHEAD_BYTES
        self.close_reason: BaseException | None = None
        self.peer = ""
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._decoder = FrameDecoder()
        self._request_ids = itertools.count(1)
        self._requests: dict[int, asyncio.Future[pb.BaseCommand]] = {}
        self._producers: dict[int, ProducerHandler] = {}
        self._consumers: dict[int, ConsumerHandler] = {}
        self._topic_list_watchers: dict[int, TopicListWatchHandler] = {}
        self._watcher_ids = itertools.count(1)
        self._close_callbacks: list[Callable[[Connection, BaseException | None], None]] = []
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._out_event = asyncio.Event()
        self._last_received_s = time.monotonic()
        self._ping_outstanding = False
        self._tasks: list[asyncio.Task] = []
        self._start_lock = asyncio.Lock()
        self._closed = asyncio.Event()

    def __repr__(self) -> str:
        via = f" via {self.url}" if self.logical_url != self.url else ""
        return f"<Connection {self.logical_url}{via} {self.state.value}>"

    # -- lifecycle -----------------------------------------------------------------------------------------

    @property
    def is_ready(self) -> bool:
        return self.state is ConnectionState.READY

    async def start(self) -> Connection:
        """Connects and handshakes (idempotent; concurrent callers share one attempt).

        Raises:
            ConnectError: the socket could not be opened, or the handshake timed out or was cut off.
            ServerError: the broker refused CONNECT (``AuthenticationError``, ``UnsupportedVersionError``...).
            AlreadyClosedError: the connection was closed before.
        """
        async with self._start_lock:
            if self.state is ConnectionState.READY:
                return self
            if self.state is ConnectionState.CLOSED:
                # A caller that queued behind a failed attempt gets that attempt's error (retriable or not).
                if isinstance(self.close_reason, ClientError):
                    raise self.close_reason
                raise AlreadyClosedError(f"connection to {self.logical_url} is closed") from self.close_reason
            self.state = ConnectionState.CONNECTING
            try:
                leftover = await asyncio.wait_for(self._open_and_handshake(), self.connect_timeout_s)
            except BaseException as exc:
                err: BaseException = exc
                if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
                    err = ConnectError(f"connecting to {self.target} timed out after {self.connect_timeout_s} s")
                elif isinstance(exc, ProtocolError):
                    err = ConnectError(f"broker {self.target} broke the protocol during the handshake: {exc}")
                self._abort(err)
                if err is exc:
                    raise
                raise err from exc
            self.state = ConnectionState.READY
            self._last_received_s = time.monotonic()
            loop = asyncio.get_running_loop()
            self._tasks = [
                loop.create_task(self._read_loop(leftover), name=f"pulsar-read {self.peer}"),
                loop.create_task(self._write_loop(), name=f"pulsar-write {self.peer}"),
                loop.create_task(self._keep_alive_loop(), name=f"pulsar-keepalive {self.peer}"),
            ]
            for task in self._tasks:
                task.add_done_callback(self._task_done)
            log.debug("[%s] connected to %s (server %s, protocol %d)", self.peer, self.target, self.server_version,
                      self.server_protocol_version)
            return self

    @property
    def target(self) -> str:
        """The broker this connection reaches, and the proxy it goes through when it does: ``pulsar+ssl://b:1
        via pulsar+ssl://proxy:2``."""
        return str(self.logical_url) if self.logical_url == self.url else f"{self.logical_url} via {self.url}"

    async def close(self) -> None:
        """Closes the connection (idempotent) and awaits its tasks."""
        self._abort(None)
        current = asyncio.current_task()
        tasks = [t for t in self._tasks if t is not current]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._writer is not None:
            try:
                await asyncio.wait_for(self._writer.wait_closed(), 1.0)
            except (Exception, asyncio.CancelledError):  # noqa: BLE001 - a reset socket fails here too
                pass

    async def wait_closed(self) -> BaseException | None:
        """Waits until the connection is closed; returns why (None for a local close)."""
        await self._closed.wait()
        return self.close_reason

    def on_close(self, callback: Callable[[Connection, BaseException | None], None]) -> None:
        """Calls ``callback(conn, reason)`` once the connection closes (at once if it already has)."""
        if self.state is ConnectionState.CLOSED:
            callback(self, self.close_reason)
        else:
            self._close_callbacks.append(callback)

    def _task_done(self, task: asyncio.Task) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("[%s] connection task %s died", self.peer, task.get_name(), exc_info=exc)
            self._abort(ConnectionClosedError(f"connection to {self.target} failed: {exc!r}"))

    def _abort(self, exc: BaseException | None) -> None:
        """Closes everything at once (see the module docstring); safe to call from any callback or task."""
        if self.state is ConnectionState.CLOSED:
            return
        was_ready = self.state is ConnectionState.READY
        self.state = ConnectionState.CLOSED
        self.close_reason = exc
        if self._writer is not None:
            self._writer.close()
        failure = exc if isinstance(exc, ClientError) else ConnectionClosedError(
            f"connection to {self.target} closed" + (f": {exc}" if exc else "")
        )
        requests, self._requests = self._requests, {}
        for fut in requests.values():
            if not fut.done():
                fut.set_exception(failure)
        producers, self._producers = self._producers, {}
        consumers, self._consumers = self._consumers, {}
        watchers, self._topic_list_watchers = self._topic_list_watchers, {}
        callbacks, self._close_callbacks = self._close_callbacks, []
        for handler in [*producers.values(), *consumers.values(), *watchers.values()]:
            try:
                handler._handle_connection_closed(self, exc)
            except Exception:  # noqa: BLE001 - one handler's bug must not stop the others being told
                log.exception("[%s] close handler of %r failed", self.peer, handler)
        for callback in callbacks:
            try:
                callback(self, exc)
            except Exception:  # noqa: BLE001
                log.exception("[%s] close callback failed", self.peer)
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        self._closed.set()
        if was_ready:
            level = logging.DEBUG if exc is None else logging.INFO
            log.log(level, "[%s] connection to %s closed%s", self.peer, self.target, f": {exc}" if exc else "")

    # -- handshake -----------------------------------------------------------------------------------------

    async def _open_socket(self) -> None:
        errors = []
        for host, port in self.url.hosts:
            try:
                self._reader, self._writer = await asyncio.open_connection(
                    host,
                    port,
                    ssl=self.ssl_context,
                    server_hostname=host if self.ssl_context is not None else None,
                    limit=_STREAM_LIMIT_BYTES,
                )
                self.peer = f"{host}:{port}"
                return
            except OSError as exc:  # ssl.SSLError is an OSError too
                errors.append(f"{host}:{port}: {exc}")
        raise ConnectError(f"cannot connect to {self.target}: {'; '.join(errors)}")

    async def _open_and_handshake(self) -> list[Frame]:
        await self._open_socket()
        assert self._reader is not None and self._writer is not None
        proxy_to = self.logical_url.host_port if self.logical_url != self.url else None
        self._writer.write(
            encode_command(
                connect_command(
                    client_version=self.client_version,
                    auth_method_name=self.auth.method_name if self.auth else None,
                    auth_data=self.auth.get_data() if self.auth else None,
                    proxy_to_broker_url=proxy_to,
                    protocol_version=self.protocol_version,
                    topic_watchers=self.topic_watchers,
                    original_principal=self.original_principal,
                    original_auth=((self.original_auth.method_name, self.original_auth.get_data())
                                   if self.original_auth else None),
                )
            )
        )
        while True:
            data = await self._reader.read(READ_SIZE_BYTES)
            if not data:
                raise ConnectError(f"{self.target} closed the connection during the CONNECT handshake")
            frames = self._decoder.feed(data)
            for index, frame in enumerate(frames):
                cmd = frame.command
                if cmd.type == T.CONNECTED:
                    self.server_version = cmd.connected.server_version
                    self.server_protocol_version = cmd.connected.protocol_version
                    self.broker_supports_topic_watchers = cmd.connected.feature_flags.supports_topic_watchers
                    if cmd.connected.HasField("max_message_size"):
                        self.max_message_size_bytes = cmd.connected.max_message_size
                        self._decoder.frame_size_bytes_max = max(
                            FRAME_SIZE_BYTES_MAX_DEFAULT, cmd.connected.max_message_size + _FRAMING_OVERHEAD_BYTES
                        )
                    return frames[index + 1 :]
                if cmd.type == T.ERROR:
                    raise error_from_server(cmd.error.error, cmd.error.message, context=f"CONNECT to {self.target}")
                if cmd.type == T.AUTH_CHALLENGE:
                    self._writer.write(encode_command(self._auth_response()))
                elif cmd.type == T.PING:
                    self._writer.write(encode_command(wrap(pb.CommandPong())))
                else:
                    log.warning("[%s] ignoring %s during the handshake", self.peer, T.Type.Name(cmd.type))

    def _auth_response(self) -> pb.BaseCommand:
        auth = self.auth or Auth("none")
        return wrap(
            pb.CommandAuthResponse(
                client_version=self.client_version,
                protocol_version=self.protocol_version,
                response=pb.AuthData(auth_method_name=auth.method_name, auth_data=auth.get_data()),
            )
        )

    # -- registration --------------------------------------------------------------------------------------

    def register_producer(self, producer_id: int, handler: ProducerHandler) -> None:
        self._check_usable()
        self._producers[producer_id] = handler

    def unregister_producer(self, producer_id: int, handler: ProducerHandler | None = None) -> None:
        if handler is None or self._producers.get(producer_id) is handler:
            self._producers.pop(producer_id, None)

    def register_consumer(self, consumer_id: int, handler: ConsumerHandler) -> None:
        self._check_usable()
        self._consumers[consumer_id] = handler

    def unregister_consumer(self, consumer_id: int, handler: ConsumerHandler | None = None) -> None:
        if handler is None or self._consumers.get(consumer_id) is handler:
            self._consumers.pop(consumer_id, None)

    def new_watcher_id(self) -> int:
        return next(self._watcher_ids)

    def register_topic_list_watcher(self, watcher_id: int, handler: TopicListWatchHandler) -> None:
        self._check_usable()
        self._topic_list_watchers[watcher_id] = handler

    def unregister_topic_list_watcher(self, watcher_id: int, handler: TopicListWatchHandler | None = None) -> None:
        if handler is None or self._topic_list_watchers.get(watcher_id) is handler:
            self._topic_list_watchers.pop(watcher_id, None)

    @property
    def producer_count(self) -> int:
        return len(self._producers)

    @property
    def consumer_count(self) -> int:
        return len(self._consumers)

    # -- writing -------------------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self.state is not ConnectionState.READY:
            raise ConnectionClosedError(f"connection to {self.target} is {self.state.value}") from self.close_reason

    def write(self, *buffers: bytes) -> None:
        """Queues encoded frames for the write loop (no await; see the module docstring).

        Raises:
            ConnectionClosedError: the connection is not ready.
        """
        self._check_usable()
        self._out.extend(buffers)
        for buf in buffers:
            self._out_bytes += len(buf)
        self._out_event.set()

    def send_command(self, cmd: pb.BaseCommand) -> None:
        """Queues a command that expects no answer (FLOW, ACK, PONG, REDELIVER...)."""
        self.write(encode_command(cmd))

    @property
    def write_buffer_bytes(self) -> int:
        """Bytes queued or sitting in the transport's buffer, not yet on the socket."""
        transport_bytes = self._writer.transport.get_write_buffer_size() if self._writer is not None else 0
        return self._out_bytes + transport_bytes

    async def _write_loop(self) -> None:
        writer = self._writer
        assert writer is not None
        event = self._out_event
        try:
            while True:
                await event.wait()
                event.clear()
                if not self._out:
                    continue
                out, self._out = self._out, []
                self._out_bytes = 0
                writer.writelines(out)
                await writer.drain()
        except (ConnectionError, OSError) as exc:
            self._abort(ConnectionClosedError(f"writing to {self.target} failed: {exc}"))

    # -- requests ------------------------------------------------------------------------------------------

    def new_request_id(self) -> int:
        return next(self._request_ids)

    async def request(self, inner: ProtoMessage, *, timeout_s: float | None = None) -> pb.BaseCommand:
        """Sends a command carrying a ``request_id`` (set here) and returns the broker's answer.

        ``inner`` is the command's own message (``CommandLookupTopic(...)``, ``CommandProducer(...)``...).
        A PRODUCER_SUCCESS with ``producer_ready = false`` (a producer waiting for exclusive access) is not
        an answer yet: the call keeps waiting for the next one.

        Raises:
            ServerError: the broker answered ERROR (its code as a typed error).
            RequestTimeoutError: no answer within ``timeout_s`` (default: ``operation_timeout_s``).
            ConnectionClosedError: the connection closed first.
        """
        self._check_usable()
        request_id = next(self._request_ids)
        inner.request_id = request_id  # type: ignore[attr-defined]
        cmd = wrap(inner)
        fut: asyncio.Future[pb.BaseCommand] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = fut
        name = T.Type.Name(cmd.type)
        try:
            self.write(encode_command(cmd))
            timeout = self.operation_timeout_s if timeout_s is None else timeout_s
            try:
                response = await asyncio.wait_for(fut, timeout)
            except (asyncio.TimeoutError, TimeoutError):
                raise RequestTimeoutError(
                    f"{name} (request {request_id}) to {self.target}: no answer within {timeout} s"
                ) from None
        finally:
            self._requests.pop(request_id, None)
        if response.type == T.ERROR:
            raise error_from_server(response.error.error, response.error.message, context=name)
        return response

    # -- reading -------------------------------------------------------------------------------------------

    async def _read_loop(self, leftover: list[Frame]) -> None:
        reader = self._reader
        assert reader is not None
        self._dispatch_all(leftover)
        decoder = self._decoder
        try:
            while True:
                data = await reader.read(READ_SIZE_BYTES)
                if not data:
                    self._abort(ConnectionClosedError(f"{self.target} closed the connection"))
                    return
                self._last_received_s = time.monotonic()
                self._ping_outstanding = False
                try:
                    frames = decoder.feed(data)
                except ProtocolError as exc:
                    self._dispatch_all(list(exc.frames))
                    self._abort(ConnectionClosedError(f"{self.target} broke the protocol: {exc}"))
                    return
                self._dispatch_all(frames)
        except (ConnectionError, OSError) as exc:
            self._abort(ConnectionClosedError(f"reading from {self.target} failed: {exc}"))

    def _dispatch_all(self, frames: list[Frame]) -> None:
        for frame in frames:
            if self.state is ConnectionState.CLOSED:
                return
            try:
                self._dispatch(frame)
            except Exception:  # noqa: BLE001 - a handler's bug must not take the connection down
                log.exception("[%s] handling %s failed", self.peer, T.Type.Name(frame.command.type))

    # -- keep-alive ----------------------------------------------------------------------------------------

    async def _keep_alive_loop(self) -> None:
        interval = self.keep_alive_interval_s
        while True:
            await asyncio.sleep(interval)
            if self.state is not ConnectionState.READY:
                return
            if time.monotonic() - self._last_received_s < interval:
                continue
            if self._ping_outstanding:
                self._abort(
                    ConnectionClosedError(f"{self.target} did not answer PING within {interval} s (keep-alive)")
                )
                return
            self._ping_outstanding = True
            self.write(encode_command(wrap(pb.CommandPing())))
