"""One client connection of the proxy: the only place that touches a client's socket.

Theory of operation
-------------------

The connection is an ``asyncio.Protocol`` whose life is :mod:`proxy.handshake`'s state table:

1. **Accepted.** The connection limits are checked first (:mod:`proxy.limits`): a connection over them is
   closed at once, before a TLS handshake is paid for, and counted. On a TLS port the socket is then upgraded
   (:func:`proxy.tls.start_tls_server`); a failed TLS handshake (a plain-text client, an untrusted or missing
   client certificate) closes it and is counted by reason. A handshake timer runs from here until the client
   reaches LOOKUPS or RELAYING.
2. **CONNECT.** The first frame must be CONNECT (:func:`proxy.handshake.decide_connect`). With authentication
   on, its credentials (a token, or ``tls`` and the verified client certificate) give the client's role
   (``magnetar.auth``); refused credentials are answered ERROR AuthenticationError, counted by reason, and the
   connection closes. Without
   ``proxy_to_broker_url`` the proxy answers CONNECTED and serves lookups; with it, the client's reading is
   paused, the target is checked against the registered brokers, the proxy connects to the broker
   (:class:`proxy.relay.BrokerLink`), and once the broker accepted the proxy's CONNECT the two sockets are
   spliced: the broker's CONNECTED goes to the client, whatever the client sent after its CONNECT goes to the
   broker, and reading resumes.
3. **Lookups.** Each lookup command runs as a task (answers may come back in any order, each under its request
   id), admitted by the proxy-wide lookup limit or answered TooManyRequests at once. PING is answered; a lookup
   connection quiet for ``keep_alive_interval_s`` is PINGed and closed when it stays quiet.
4. **Relaying.** ``data_received`` writes to the broker's transport and counts the read; backpressure pauses the
   side that writes faster (see :mod:`proxy.relay`).

Closing is one path, :meth:`ProxyConnection._finish` (idempotent): timers and tasks are cancelled, the broker
side is closed with the client side, and the connection's place in the limits is given back. Malformed input
(a bad frame, a frame too large before forwarding, anything but CONNECT first) closes the connection; it never
raises out of a callback.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Optional

from magnetar.auth.errors import AuthenticationError
from magnetar.auth.providers import Credentials
from magnetar.errors import MagnetarError
from magnetar.protocol import FrameDecoder, ProtocolError, command_body, encode_command, pb, wrap

from .context import ProxyContext
from .errors import BrokerCredentialsError, BrokerUnavailableError, TargetDeniedError
from .handshake import (ALLOWED, HANDSHAKE_FRAME_BYTES_MAX, HANDSHAKING, LOOKUP_COMMANDS, NO_REQUEST_ID,
                        ConnectDecision, ConnectionState, auth_challenge, broker_connect, connected, decide_connect,
                        decode_one, error, rejection, request_id_of, split_frame)
from .relay import BrokerLink, BrokerRefusedError, close_transport
from .tls import failure_reason, peer_certificate, start_tls_server
from .transports import release_transport

__all__ = ["ProxyConnection"]

log = logging.getLogger("proxy.connection")

T = pb.BaseCommand
_KINDS = {T.LOOKUP: "lookup", T.PARTITIONED_METADATA: "partitions_metadata",
          T.GET_TOPICS_OF_NAMESPACE: "get_topics_of_namespace", T.GET_SCHEMA: "get_schema"}
_PONG = encode_command(wrap(pb.CommandPong()))
_PING = encode_command(wrap(pb.CommandPing()))


class ProxyConnection(asyncio.Protocol):
    """A client connection (see the module docstring).

    Args:
        ctx: what the proxy's connections share.
        tls: the connection came in on the TLS port.
    """

    def __init__(self, ctx: ProxyContext, *, tls: bool) -> None:
        self.ctx = ctx
        self.tls = tls
        self.state = ConnectionState.ACCEPTED
        self.transport: Optional[asyncio.Transport] = None
        self.peer = "?"
        self.ip = "?"
        self.role: Optional[str] = None
        self.auth_method = ""
        self.peer_certificate: Optional[dict] = None
        self._auth_data = b""
        self._expires_at_s: Optional[float] = None  # epoch seconds the credentials are valid until
        self._challenged = False
        self.protocol_version = 0
        self.close_reason = ""
        self._admitted = False
        self._inbox = bytearray()
        self._decoder: Optional[FrameDecoder] = None
        self._link: Optional[BrokerLink] = None
        self._tasks: set[asyncio.Task] = set()
        self._handshake_timer: Optional[asyncio.TimerHandle] = None
        self._keepalive_timer: Optional[asyncio.TimerHandle] = None
        self._credentials_timer: Optional[asyncio.TimerHandle] = None
        self._last_received_s = 0.0
        self._ping_outstanding = False
        self._loop = asyncio.get_running_loop()

    def __repr__(self) -> str:
        return f"<ProxyConnection {self.peer} {self.state.value}>"

    # -- accepting -----------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.ip, self.peer = str(peer[0]), f"{peer[0]}:{peer[1]}"
        ctx = self.ctx
        refusal = ctx.limiter.try_acquire(self.ip)
        if refusal is not None:
            ctx.stats.rejected_connections += 1
            log.warning("[%s] connection refused: over %s", self.peer, refusal.value)
            self.state = ConnectionState.CLOSED
            transport.abort()
            return
        self._admitted = True
        ctx.stats.new_connections += 1
        ctx.connections.add(self)
        transport.set_write_buffer_limits(high=ctx.relay_buffer_bytes)
        self._last_received_s = self._loop.time()
        self._handshake_timer = self._loop.call_later(ctx.handshake_timeout_s, self._handshake_timed_out)
        if self.tls:
            # Not a byte of the TLS handshake may reach this protocol: the upgrade reads it (asyncio's own event
            # loop would not read before the upgrade task runs anyway; others, such as uvloop, already may).
            transport.pause_reading()
            self._spawn(self._upgrade_to_tls(transport), "tls")
        else:
            self.state = ConnectionState.AWAITING_CONNECT

    async def _upgrade_to_tls(self, raw: asyncio.Transport) -> None:
        assert self.ctx.server_tls is not None
        try:
            # asyncio's own handshake timeout is a backstop: the handshake timer (counted) fires first.
            transport = await start_tls_server(raw, self, self.ctx.server_tls.context(),
                                               handshake_timeout_s=self.ctx.handshake_timeout_s + 1.0)
            if transport is None:  # asyncio's answer to a peer gone as the handshake completed
                raise ConnectionResetError("the client left during the TLS handshake")
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as e:
            # A peer that connects and leaves (a port probe, a load balancer's health check) is no refusal.
            log.debug("[%s] left during the TLS handshake: %r", self.peer, e)
            self._finish("the client left during the TLS handshake")
            return
        except (ssl.SSLError, OSError, TimeoutError) as e:
            if self.state is not ConnectionState.CLOSED:
                reason = failure_reason(e)
                self.ctx.stats.auth_failures[reason] += 1
                log.info("[%s] TLS handshake failed (%s): %s", self.peer, reason, e)
                self._finish(f"TLS handshake failed: {e}")
            return
        self.transport = transport
        if self.state is ConnectionState.CLOSED:  # timed out meanwhile
            transport.abort()
            return
        self.transport.set_write_buffer_limits(high=self.ctx.relay_buffer_bytes)
        self.peer_certificate = peer_certificate(self.transport)
        self.state = ConnectionState.AWAITING_CONNECT
        self._process()  # bytes that came with the end of the TLS handshake

    def _handshake_timed_out(self) -> None:
        self._handshake_timer = None
        if self.state in HANDSHAKING:
            self.ctx.stats.handshake_timeouts += 1
            log.info("[%s] closed: handshake not finished within %g s (%s)", self.peer,
                     self.ctx.handshake_timeout_s, self.state.value)
            self._close(f"handshake timeout in state {self.state.value}", abort=True)

    def _handshake_done(self) -> None:
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None

    # -- reading -------------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.state is ConnectionState.RELAYING:
            stats = self.ctx.stats
            stats.binary_ops += 1
            stats.binary_bytes += len(data)
            self._link.write(data)  # type: ignore[union-attr]
            return
        if self.state is ConnectionState.CLOSED:
            return
        self._last_received_s = self._loop.time()
        self._ping_outstanding = False
        self._inbox += data
        if len(self._inbox) > 2 * HANDSHAKE_FRAME_BYTES_MAX:  # only when not consuming (TLS end, broker connect)
            self._close("too much input before the connection was established")
            return
        self._process()

    def _process(self) -> None:
        """Consumes the buffered input the current state decodes (see the module docstring)."""
        try:
            while self._inbox and self.state in ALLOWED:
                if self.state is ConnectionState.LOOKUPS:
                    data, self._inbox = bytes(self._inbox), bytearray()
                    for frame in self._decoder.feed(data):  # type: ignore[union-attr]
                        self._on_lookup_connection_command(frame.command)
                        if self.state is not ConnectionState.LOOKUPS:
                            return
                    return
                raw = split_frame(self._inbox)
                if raw is None:
                    return
                self._on_handshake_command(decode_one(raw))
        except ProtocolError as e:
            log.info("[%s] closed: malformed input in state %s: %s", self.peer, self.state.value, e)
            self._close(f"malformed input: {e}")

    def _on_handshake_command(self, cmd: pb.BaseCommand) -> None:
        if cmd.type not in ALLOWED[self.state]:
            log.info("[%s] closed: %s in state %s", self.peer, _name(cmd.type), self.state.value)
            self._close(f"{_name(cmd.type)} in state {self.state.value}")
        elif cmd.type == T.CONNECT:
            self._on_connect(cmd.connect)
        elif cmd.type == T.PING:
            self._write(_PONG)

    def _on_connect(self, connect: pb.CommandConnect) -> None:
        decision = decide_connect(connect)
        self.protocol_version = decision.protocol_version
        if decision.refusal:
            log.info("[%s] CONNECT refused: %s", self.peer, decision.refusal)
            self._refuse(pb.NotAllowed, decision.refusal)
            return
        if not self._authenticate(connect.auth_method_name if connect.HasField("auth_method_name") else "none",
                                  connect.auth_data):
            return
        if decision.target:
            self.state = ConnectionState.CONNECTING_BROKER
            self.transport.pause_reading()  # type: ignore[union-attr]
            self._spawn(self._forward(connect, decision), "forward")
            return
        self.state = ConnectionState.LOOKUPS
        self._handshake_done()
        self._decoder = FrameDecoder(frame_size_bytes_max=HANDSHAKE_FRAME_BYTES_MAX)
        self._write(connected(decision.protocol_version))
        self._keepalive_timer = self._loop.call_later(self.ctx.keep_alive_interval_s, self._keep_alive)
        if self._expires_at_s is not None:
            self._credentials_timer = self._loop.call_later(self.ctx.refresh_check_s, self._check_credentials)

    # -- authentication ------------------------------------------------------------------------------------

    def _authenticate(self, method: str, data: bytes) -> bool:
        """Decides the client's role from credentials (CONNECT's, or AUTH_RESPONSE's for the same role);
        refuses and closes the connection when they are not good. True when authentication is off."""
        service = self.ctx.authentication
        if service is None:
            return True
        try:
            who = service.authenticate(Credentials(method=method, data=data, peer_certificate=self.peer_certificate))
            if self.role is not None and who.role != self.role:
                raise AuthenticationError(f"fresh credentials must be for role {self.role!r}, not {who.role!r}",
                                          reason="no_role")
        except AuthenticationError as e:
            self.ctx.stats.auth_failures[e.reason] += 1
            log.info("[%s] authentication refused (%s): %s", self.peer, e.reason, e)
            self._refuse(pb.AuthenticationError, str(e))
            return False
        except MagnetarError as e:  # a provider that could not decide: refused, never a crash
            self.ctx.stats.auth_failures["malformed"] += 1
            log.warning("[%s] authentication failed: %s", self.peer, e)
            self._refuse(pb.AuthenticationError, f"authentication failed: {e}")
            return False
        if self.role is None:
            log.debug("[%s] authenticated as %r by %s", self.peer, who.role, who.method)
        self.role, self.auth_method, self._auth_data = who.role, who.method, data
        self._expires_at_s = who.expires_at_s
        return True

    def _check_credentials(self) -> None:
        """On a lookup connection: expired credentials get one AUTH_CHALLENGE; still expired at the next check,
        the connection is closed (Pulsar's ``authenticationRefreshCheckSeconds`` rhythm)."""
        self._credentials_timer = None
        if self.state is not ConnectionState.LOOKUPS or self._expires_at_s is None:
            return
        if time.time() >= self._expires_at_s:
            if self._challenged:
                self.ctx.stats.auth_failures["expired"] += 1
                log.info("[%s] closed: credentials of %r expired and were not refreshed", self.peer, self.role)
                self._refuse(pb.AuthenticationError, "credentials expired and were not refreshed")
                return
            self._challenged = True
            self._write(auth_challenge(self.auth_method, self.protocol_version))
        self._credentials_timer = self._loop.call_later(self.ctx.refresh_check_s, self._check_credentials)

    def _on_auth_response(self, response: pb.CommandAuthResponse) -> None:
        if self.ctx.authentication is None:
            return
        given = response.response
        if self._authenticate(given.auth_method_name or self.auth_method, given.auth_data) and self._challenged:
            self._challenged = False
            self.ctx.stats.auth_refreshes += 1
            log.debug("[%s] credentials of %r refreshed", self.peer, self.role)

    def _credentials_expired(self) -> None:
        self._credentials_timer = None
        if self.state is ConnectionState.RELAYING:
            log.info("[%s] closed: credentials of %r expired (the client reconnects with fresh ones)", self.peer,
                     self.role)
            self._close("credentials expired")

    # -- lookups -------------------------------------------------------------------------------------------

    def _on_lookup_connection_command(self, cmd: pb.BaseCommand) -> None:
        t = cmd.type
        if t in LOOKUP_COMMANDS:
            kind = _KINDS[t]
            stats = self.ctx.stats
            stats.requests[kind] += 1
            if not self.ctx.lookup_limiter.try_acquire():
                stats.rejected_requests[kind] += 1
                self._write(rejection(t, request_id_of(cmd)))
                return
            self._spawn(self._answer(cmd), kind)
        elif t == T.PING:
            self._write(_PONG)
        elif t == T.AUTH_RESPONSE:
            self._on_auth_response(cmd.authResponse)
        elif t == T.PONG:
            pass  # liveness only: any input already counts
        else:
            message = (f"{_name(t)} is not served on a lookup connection of the proxy: producers and consumers "
                       f"connect through it with proxy_to_broker_url")
            log.info("[%s] closed: %s", self.peer, message)
            self._refuse(pb.NotAllowed, message, request_id=_any_request_id(cmd))

    async def _answer(self, cmd: pb.BaseCommand) -> None:
        try:
            frame = await self.ctx.lookups.answer(cmd, role=self.role)
        finally:
            self.ctx.lookup_limiter.release()
        if self.state is ConnectionState.LOOKUPS:
            self._write(frame)

    def _keep_alive(self) -> None:
        self._keepalive_timer = None
        if self.state is not ConnectionState.LOOKUPS:
            return
        interval = self.ctx.keep_alive_interval_s
        if self._loop.time() - self._last_received_s >= interval:
            if self._ping_outstanding:
                log.info("[%s] closed: no answer to PING within %g s", self.peer, interval)
                self._close("keep-alive timeout")
                return
            self._ping_outstanding = True
            self._write(_PING)
        self._keepalive_timer = self._loop.call_later(interval, self._keep_alive)

    # -- forwarding ----------------------------------------------------------------------------------------

    async def _forward(self, connect: pb.CommandConnect, decision: ConnectDecision) -> None:
        ctx = self.ctx
        try:
            endpoint = await ctx.directory.resolve_target(decision.target)
        except TargetDeniedError as e:
            ctx.stats.denied_targets += 1
            log.warning("[%s] refused: %s", self.peer, e)
            self._refuse(e.server_error, f"Target broker cannot be validated: {e}")
            return
        try:
            method, data = ctx.broker_client.credentials()
            forwarded = ctx.forward_credentials and self.role is not None
            frame = broker_connect(connect, protocol_version=decision.protocol_version, auth_method_name=method,
                                   auth_data=data, original_principal=self.role,
                                   original_auth_method=self.auth_method if forwarded else "",
                                   original_auth_data=self._auth_data if forwarded else b"")
            link, broker_connected = await BrokerLink.open(
                endpoint, frame, ssl_context=ctx.broker_client.ssl_context, timeout_s=ctx.broker_connect_timeout_s,
                stats=ctx.stats, relay_buffer_bytes=ctx.relay_buffer_bytes, credentials=ctx.broker_client.credentials)
        except (BrokerRefusedError, BrokerUnavailableError, BrokerCredentialsError) as e:
            ctx.stats.broker_connect_failures += 1
            log.warning("[%s] cannot forward to %s: %s", self.peer, endpoint.url, e)
            self._refuse(e.server_error, str(e))
            return
        if self.state is not ConnectionState.CONNECTING_BROKER:  # closed meanwhile
            link.close()
            return
        self._link = link
        self.state = ConnectionState.RELAYING
        self._handshake_done()
        transport = self.transport
        assert transport is not None
        transport.write(broker_connected)
        link.splice(transport, self._on_broker_lost)
        if self._inbox:  # sent by the client after its CONNECT: the broker's now
            pending, self._inbox = bytes(self._inbox), bytearray()
            ctx.stats.binary_ops += 1
            ctx.stats.binary_bytes += len(pending)
            link.write(pending)
        log.debug("[%s] forwarding to %s as %s", self.peer, endpoint.url, self.role or "(no role)")
        if self._expires_at_s is not None and not ctx.forward_credentials:
            delay = max(0.0, self._expires_at_s - time.time())
            self._credentials_timer = self._loop.call_later(delay, self._credentials_expired)
        transport.resume_reading()

    def _on_broker_lost(self, exc: Optional[BaseException]) -> None:
        self._close("the broker closed the connection" + (f": {exc}" if exc else ""))

    # -- writing and backpressure --------------------------------------------------------------------------

    def _write(self, frame: bytes) -> None:
        if self.state is not ConnectionState.CLOSED and self.transport is not None:
            self.transport.write(frame)

    def pause_writing(self) -> None:
        """The client reads slower than the proxy writes: stop reading the broker (relaying) or the client's
        own requests (lookups), so nothing queues without bound."""
        if self.state is ConnectionState.RELAYING and self._link is not None and self._link.transport is not None:
            self._link.transport.pause_reading()
        elif self.state is ConnectionState.LOOKUPS and self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.state is ConnectionState.RELAYING and self._link is not None and self._link.transport is not None:
            self._link.transport.resume_reading()
        elif self.state is ConnectionState.LOOKUPS and self.transport is not None:
            self.transport.resume_reading()

    # -- closing -------------------------------------------------------------------------------------------

    def eof_received(self) -> bool:
        return False  # no half-closed connections

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        release_transport(self.transport)  # a plain socket's; a TLS one's is released by its TLS protocol
        self._finish("the client closed the connection" + (f": {exc}" if exc else ""))

    def _refuse(self, code: int, message: str, *, request_id: int = NO_REQUEST_ID) -> None:
        """Answers ERROR and closes (after the ERROR is written)."""
        self._write(error(request_id, code, message))
        self._close(message)

    def _close(self, reason: str, *, abort: bool = False) -> None:
        transport = self.transport
        self._finish(reason)
        if transport is not None:
            if abort:
                transport.abort()
            else:
                close_transport(transport)

    def close(self, reason: str = "the proxy is shutting down") -> None:
        """Closes the connection (idempotent; queued bytes are flushed for a short grace)."""
        self._close(reason)

    def _finish(self, reason: str) -> None:
        if self.state is ConnectionState.CLOSED and not self._admitted:
            return
        self.state = ConnectionState.CLOSED
        self.close_reason = self.close_reason or reason
        for timer in (self._handshake_timer, self._keepalive_timer, self._credentials_timer):
            if timer is not None:
                timer.cancel()
        self._handshake_timer = self._keepalive_timer = self._credentials_timer = None
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        if self._link is not None:
            self._link.close()
        if self._admitted:
            self._admitted = False
            self.ctx.limiter.release(self.ip)
            self.ctx.connections.discard(self)
        self._inbox = bytearray()
        self._decoder = None

    def _spawn(self, coro, name: str) -> None:
        task = self._loop.create_task(coro, name=f"proxy-{name} {self.peer}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("[%s] %s failed", self.peer, task.get_name(), exc_info=task.exception())
            self._close(f"internal error: {task.exception()!r}")

    async def wait_tasks(self) -> None:
        """Awaits whatever the connection still runs (after :meth:`close`)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _name(command_type: int) -> str:
    try:
        return T.Type.Name(command_type)
    except ValueError:
        return f"command type {command_type}"


def _any_request_id(cmd: pb.BaseCommand) -> int:
    """The request id of any command that carries one (for the ERROR answering it), or NO_REQUEST_ID."""
    body = command_body(cmd)
    return body.request_id if "request_id" in body.DESCRIPTOR.fields_by_name else NO_REQUEST_ID
