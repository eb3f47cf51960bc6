"""TLS of the proxy's client side: the contexts (from ``magnetar.auth.tls``), and a TLS upgrade of accepted
sockets that keeps idle connections small.

Contexts. The TLS ports use a :class:`magnetar.auth.tls.ReloadingServerContext` built from ``tls_cert_file``,
``tls_key_file`` and ``tls_trust_certs_file``: renewed certificate files are served to new connections within
a second, without a restart. Client certificates are asked for when a trust file is given (verified against
it) and required with ``tls_require_trusted_client_cert``. Towards brokers, :func:`broker_client_context`.

Idle memory. asyncio's TLS transport gives every connection a 256 KiB receive buffer, allocated and zeroed
when the connection is made: 10,000 idle clients would hold 2.5 GiB. :func:`start_tls_server` upgrades an
accepted socket as ``loop.start_tls`` does, with a protocol that reads every connection's ciphertext into one
256 KiB buffer shared by the thread's connections (a connection holds none of its own), and decrypts one TLS
record (16 KiB) per ``SSLObject.read``. Sharing is safe because the event loop fills the buffer and hands it
over in one callback (``get_buffer``, ``recv_into``, ``buffer_updated``), and ``buffer_updated`` copies the
bytes into the connection's own incoming ``MemoryBIO`` before it returns: no other read comes in between and
no view of the buffer outlives the callback. CPython already lets OpenSSL release its own buffers while a
connection is idle; what stays is OpenSSL's per-connection state (about 17 KiB with OpenSSL 3.0). The same
protocol releases the socket transport under it when the connection is lost (:mod:`proxy.transports`). Should
asyncio's TLS protocol not have the shape this relies on, it falls back to ``loop.start_tls``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl
import threading
from asyncio import sslproto
from typing import Optional

from magnetar.auth.tls import ReloadingServerContext, TlsSettings, client_context, handshake_failure

from .config import ProxyConfig
from .transports import release_transport

__all__ = ["broker_client_context", "failure_reason", "server_tls", "start_tls_server"]

log = logging.getLogger("proxy.tls")

_RECEIVE_BUFFER_BYTES = 256 * 1024  # one socket read, as asyncio's own TLS protocol reads
_RECORD_BYTES = 16 * 1024  # one SSLObject.read: a TLS record's plaintext, the most one read returns
_shared = threading.local()


def server_tls(config: ProxyConfig) -> ReloadingServerContext:
    """The TLS ports' context, reloaded when its files change.

    Raises:
        ConfigError: the files cannot be read or used.
    """
    return ReloadingServerContext(config.tls_settings())


def broker_client_context(config: ProxyConfig, *, cert_file: str = "", key_file: str = "") -> ssl.SSLContext:
    """The context the proxy connects to brokers' TLS ports with: verified against
    ``broker_client_trust_certs_file`` (or the system's CAs), host names checked during the handshake when
    ``tls_hostname_verification_enabled``, and the proxy's own certificate when it authenticates by TLS.

    Raises:
        ConfigError: the files cannot be read or used.
    """
    return client_context(TlsSettings(cert_file=cert_file, key_file=key_file,
                                      trust_certs_file=config.broker_client_trust_certs_file,
                                      min_protocol=config.tls_min_protocol, ciphers=config.tls_ciphers),
                          verify_hostname=config.tls_hostname_verification_enabled)


def _receive_buffer() -> tuple[bytearray, memoryview]:
    """This thread's shared receive buffer (made on first use) and a view of it."""
    buffer = getattr(_shared, "buffer", None)
    if buffer is None:
        buffer = _shared.buffer = bytearray(_RECEIVE_BUFFER_BYTES)
        _shared.view = memoryview(buffer)
    return buffer, _shared.view


class _CompactSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol reading into the thread's shared receive buffer (see the module docstring), and
    releasing its socket transport when the connection is lost."""

    max_size = _RECORD_BYTES  # SSLObject.read's size; the base allocates this much once, replaced at once

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # get_buffer hands out the whole of it: it is never shorter than what get_buffer wants (max_size).
        self._ssl_buffer, self._ssl_buffer_view = _receive_buffer()

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        raw = self._transport
        super().connection_lost(exc)
        release_transport(raw)


def _compact_supported() -> bool:
    """Whether asyncio's TLS protocol has the constructor and buffers this module relies on (CPython 3.11+)."""
    try:
        params = inspect.signature(sslproto.SSLProtocol.__init__).parameters
        reads_via_view = "_ssl_buffer_view" in inspect.getsource(sslproto.SSLProtocol.buffer_updated)
        hands_out_view = "_ssl_buffer_view" in inspect.getsource(sslproto.SSLProtocol.get_buffer)
    except (TypeError, ValueError, OSError):
        return False
    expected = {"loop", "app_protocol", "sslcontext", "waiter", "server_side", "call_connection_made",
                "ssl_handshake_timeout"}
    return (isinstance(getattr(sslproto.SSLProtocol, "max_size", None), int) and expected <= set(params)
            and reads_via_view and hands_out_view and hasattr(sslproto.SSLProtocol, "connection_lost"))


_COMPACT = _compact_supported()


async def start_tls_server(transport: asyncio.BaseTransport, protocol: asyncio.BaseProtocol,
                           context: ssl.SSLContext, *, handshake_timeout_s: float) -> asyncio.Transport:
    """Upgrades an accepted plain transport to TLS (server side); returns the TLS transport ``protocol`` now uses.

    ``protocol.connection_made`` is not called again. Raises what ``loop.start_tls`` raises (``ssl.SSLError``,
    ``ConnectionError``, ``TimeoutError``) with the socket closed.
    """
    loop = asyncio.get_running_loop()
    if not _COMPACT or not getattr(transport, "_start_tls_compatible", False):
        return await loop.start_tls(transport, protocol, context, server_side=True,
                                    ssl_handshake_timeout=handshake_timeout_s)
    # What loop.start_tls does (CPython 3.11-3.13), with the compact protocol.
    waiter = loop.create_future()
    ssl_protocol = _CompactSSLProtocol(loop, protocol, context, waiter, server_side=True,
                                       ssl_handshake_timeout=handshake_timeout_s, call_connection_made=False)
    transport.pause_reading()
    transport.set_protocol(ssl_protocol)
    conmade = loop.call_soon(ssl_protocol.connection_made, transport)
    resume = loop.call_soon(transport.resume_reading)
    try:
        await waiter
    except BaseException:
        transport.close()
        conmade.cancel()
        resume.cancel()
        raise
    return getattr(ssl_protocol, "_app_transport", None)


def failure_reason(exc: BaseException) -> str:
    """The ``magnetar_proxy_auth_failures_total`` reason of a failed TLS handshake: ``no_client_cert``,
    ``untrusted_cert``, or ``malformed`` (not TLS at all, no common protocol...), as
    :func:`magnetar.auth.tls.handshake_failure` names them; ``handshake_timeout`` when it took too long."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "handshake_timeout"
    return handshake_failure(exc).reason


def peer_certificate(transport: Optional[asyncio.BaseTransport]) -> Optional[dict]:
    """The verified client certificate of a TLS transport (``getpeercert()``), or None."""
    if transport is None:
        return None
    cert = transport.get_extra_info("peercert")
    return cert or None
