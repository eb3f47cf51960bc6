"""The proxy's connection to a broker on behalf of one client (Pulsar's ``DirectProxyHandler``).

Theory of operation
-------------------

:meth:`BrokerLink.open` connects to a registered broker endpoint (TLS when the endpoint is ``pulsar+ssl://``,
its host name verified during the TLS handshake, before the proxy's credentials are sent), writes the CONNECT
the proxy built for the client (its own credentials, the client's role as ``original_principal``) and reads
frames until the broker answers:

* CONNECTED: the handshake is done; :meth:`open` returns the link and the CONNECTED frame, which the client gets
  as it is (the broker's version, maximum message size and feature flags are what the client deals with);
* ERROR: the broker refused the proxy or the principal: :class:`BrokerRefusedError` carries its code and text,
  which the client gets;
* AUTH_CHALLENGE: answered with the proxy's own credentials, read afresh; PING: PONG.

Then :meth:`BrokerLink.splice` joins it to the client connection, and from there on neither side decodes a
frame: bytes read from one transport are written to the other. Backpressure is the transports' own: when the
bytes queued towards one side pass ``relay_buffer_bytes`` its ``pause_writing`` stops reading from the other
side, and ``resume_writing`` starts it again, so a slow reader costs at most that much memory per direction.
When either side closes, both close: the other side's queued bytes are flushed first, for at most
``CLOSE_GRACE_S``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import ssl
from typing import Callable, Optional

from magnetar.protocol import ProtocolError, encode_command, pb, wrap

from .errors import BrokerUnavailableError, ProxyError
from .handshake import PROXY_VERSION, decode_one, split_frame
from .metrics import ProxyStats
from .targets import BrokerEndpoint
from .transports import release_transport

__all__ = ["BrokerLink", "BrokerRefusedError", "CLOSE_GRACE_S", "close_transport"]

log = logging.getLogger("proxy.relay")

T = pb.BaseCommand
CLOSE_GRACE_S = 5.0


class BrokerRefusedError(ProxyError):
    """The broker answered the proxy's CONNECT with ERROR (``server_error`` is its code)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.server_error = code


class LinkState(enum.Enum):
    CONNECTING = "connecting"
    HANDSHAKE = "handshake"
    SPLICED = "spliced"
    CLOSED = "closed"


def close_transport(transport: Optional[asyncio.BaseTransport]) -> None:
    """Closes ``transport`` after its queued bytes are written, or aborts it if they are not within the grace."""
    if transport is None or transport.is_closing():
        return
    transport.close()
    if isinstance(transport, asyncio.WriteTransport) and transport.get_write_buffer_size():
        asyncio.get_running_loop().call_later(CLOSE_GRACE_S, transport.abort)


class BrokerLink(asyncio.Protocol):
    """One proxy-to-broker connection (see the module docstring).

    Args:
        endpoint: the broker endpoint.
        stats: where relayed reads are counted.
        relay_buffer_bytes: the write buffer's high-water mark.
        credentials: ``() -> (auth_method_name, auth_data)`` of the proxy, for AUTH_CHALLENGE.
    """

    def __init__(self, endpoint: BrokerEndpoint, *, stats: ProxyStats, relay_buffer_bytes: int,
                 credentials: Callable[[], tuple[str, bytes]]) -> None:
        self.endpoint = endpoint
        self.stats = stats
        self.relay_buffer_bytes = relay_buffer_bytes
        self._credentials = credentials
        self.state = LinkState.CONNECTING
        self.transport: Optional[asyncio.Transport] = None
        self._inbox = bytearray()
        self._handshake: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._peer: Optional[asyncio.Transport] = None
        self._on_lost: Optional[Callable[[Optional[BaseException]], None]] = None
        self._writing_paused = False

    def __repr__(self) -> str:
        return f"<BrokerLink {self.endpoint.url} {self.state.value}>"

    # -- opening -------------------------------------------------------------------------------------------

    @classmethod
    async def open(cls, endpoint: BrokerEndpoint, connect_frame: bytes, *, ssl_context: Optional[ssl.SSLContext],
                   timeout_s: float, stats: ProxyStats, relay_buffer_bytes: int,
                   credentials: Callable[[], tuple[str, bytes]]) -> tuple["BrokerLink", bytes]:
        """Connects, handshakes, and returns the link with the broker's CONNECTED frame.

        Raises:
            BrokerRefusedError: the broker answered ERROR.
            BrokerUnavailableError: it could not be reached, TLS failed, or it did not answer in time.
        """
        loop = asyncio.get_running_loop()
        link = cls(endpoint, stats=stats, relay_buffer_bytes=relay_buffer_bytes, credentials=credentials)
        if endpoint.tls and ssl_context is None:
            raise BrokerUnavailableError(f"{endpoint.url} is a TLS endpoint and the proxy has no TLS settings "
                                         f"towards brokers")
        tls = ssl_context if endpoint.tls else None
        try:
            async with asyncio.timeout(timeout_s):
                await loop.create_connection(lambda: link, endpoint.host, endpoint.port, ssl=tls,
                                             server_hostname=endpoint.host if tls else None)
                link.state = LinkState.HANDSHAKE
                assert link.transport is not None
                link.transport.write(connect_frame)
                connected = await link._handshake
        except BrokerRefusedError:
            link.close()
            raise
        except TimeoutError:
            link.close()
            raise BrokerUnavailableError(f"broker {endpoint.url} did not complete the handshake within "
                                         f"{timeout_s:g} s") from None
        except (OSError, ProtocolError, BrokerUnavailableError) as e:  # ssl.SSLError is an OSError
            link.close()
            raise BrokerUnavailableError(f"cannot connect to broker {endpoint.url}: {e}") from None
        except BaseException:
            link.close()
            raise
        return link, connected

    # -- asyncio.Protocol ----------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=self.relay_buffer_bytes)

    def data_received(self, data: bytes) -> None:
        if self.state is LinkState.SPLICED:
            stats = self.stats
            stats.binary_ops += 1
            stats.binary_bytes += len(data)
            self._peer.write(data)  # type: ignore[union-attr]
            return
        if self.state is LinkState.CLOSED:
            return
        self._inbox += data
        try:
            self._read_handshake()
        except (ProtocolError, ProxyError) as e:
            if not self._handshake.done():
                self._handshake.set_exception(e if isinstance(e, ProxyError) else BrokerUnavailableError(
                    f"broker {self.endpoint.url} broke the protocol during the handshake: {e}"))
            self.close()

    def _read_handshake(self) -> None:
        while not self._handshake.done():
            frame = split_frame(self._inbox)
            if frame is None:
                return
            cmd = decode_one(frame)
            if cmd.type == T.CONNECTED:
                self._handshake.set_result(frame)
            elif cmd.type == T.ERROR:
                raise BrokerRefusedError(cmd.error.error, cmd.error.message)
            elif cmd.type == T.AUTH_CHALLENGE:
                method, data = self._credentials()
                self.transport.write(encode_command(wrap(pb.CommandAuthResponse(  # type: ignore[union-attr]
                    client_version=PROXY_VERSION, protocol_version=cmd.authChallenge.protocol_version,
                    response=pb.AuthData(auth_method_name=method, auth_data=data)))))
            elif cmd.type == T.PING:
                self.transport.write(encode_command(wrap(pb.CommandPong())))  # type: ignore[union-attr]
            else:
                raise BrokerUnavailableError(f"broker {self.endpoint.url} sent {T.Type.Name(cmd.type)} "
                                             f"before CONNECTED")

    def pause_writing(self) -> None:
        """The broker reads slower than the client writes: stop reading the client."""
        self._writing_paused = True
        if self._peer is not None:
            self._peer.pause_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        if self._peer is not None:
            self._peer.resume_reading()

    def eof_received(self) -> bool:
        return False  # no half-closed connections: close both sides

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.state = LinkState.CLOSED
        release_transport(self.transport)
        if not self._handshake.done():
            self._handshake.set_exception(BrokerUnavailableError(
                f"broker {self.endpoint.url} closed the connection during the handshake"
                + (f": {exc}" if exc else "")))
        if not self._handshake.cancelled():
            self._handshake.exception()  # marked retrieved: nobody may be waiting any more (the client left)
        if self._on_lost is not None:
            on_lost, self._on_lost = self._on_lost, None
            on_lost(exc)

    # -- splicing ------------------------------------------------------------------------------------------

    def splice(self, peer: asyncio.Transport, on_lost: Callable[[Optional[BaseException]], None]) -> None:
        """From now on, every byte the broker sends goes to ``peer`` (the client) as it is.

        ``on_lost`` is called once when the broker's side closes. Bytes the broker sent after CONNECTED, read
        with it, go first.
        """
        if self.state is LinkState.CLOSED:
            on_lost(None)
            return
        self._peer = peer
        self._on_lost = on_lost
        self.state = LinkState.SPLICED
        if self._writing_paused:
            peer.pause_reading()
        if self._inbox:
            leftover, self._inbox = bytes(self._inbox), bytearray()
            self.stats.binary_ops += 1
            self.stats.binary_bytes += len(leftover)
            peer.write(leftover)

    def write(self, data: bytes) -> None:
        """Client bytes towards the broker (counted by the caller)."""
        if self.transport is not None and self.state is not LinkState.CLOSED:
            self.transport.write(data)

    def close(self) -> None:
        """Closes the broker side (idempotent); ``on_lost`` is not called for a close asked here."""
        self._on_lost = None
        if self.state is not LinkState.CLOSED:
            self.state = LinkState.CLOSED
        close_transport(self.transport)
