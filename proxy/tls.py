"""TLS of the proxy's client side: the contexts (from ``magnetar.auth.tls``), and a TLS upgrade of accepted
sockets that keeps idle connections small.

Contexts. The TLS ports use a :class:`magnetar.auth.tls.ReloadingServerContext` built from ``tls_cert_file``,
``tls_key_file`` and ``tls_trust_certs_file``: renewed certificate files are served to new connections within
a second, without a restart. Client certificates are asked for when a trust file is given (verified against
it) and required with ``tls_require_trusted_client_cert``. Towards brokers, :func:`broker_client_context`.

Idle memory. asyncio's TLS transport gives every connection a 256 KiB receive buffer, allocated and zeroed
when the connection is made: 10,000 idle clients would hold 2.5 GiB. :func:`start_tls_server` upgrades an
accepted socket as ``loop.start_tls`` does, with a 16 KiB buffer (one TLS record, the most one read returns);
CPython already lets OpenSSL release its own buffers while a connection is idle. Should asyncio's TLS
protocol not have the shape this relies on, it falls back to ``loop.start_tls``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import ssl
from asyncio import sslproto
from typing import Optional

from magnetar.auth.tls import ReloadingServerContext, TlsSettings, client_context, handshake_failure

from .config import ProxyConfig

__all__ = ["broker_client_context", "failure_reason", "server_tls", "start_tls_server"]

log = logging.getLogger("proxy.tls")

_RECEIVE_BUFFER_BYTES = 16 * 1024


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


class _CompactSSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a receive buffer of one TLS record instead of 256 KiB."""

    max_size = _RECEIVE_BUFFER_BYTES


def _compact_supported() -> bool:
    """Whether asyncio's TLS protocol has the constructor and buffer this module relies on (CPython 3.11+)."""
    try:
        params = inspect.signature(sslproto.SSLProtocol.__init__).parameters
    except (TypeError, ValueError):
        return False
    expected = {"loop", "app_protocol", "sslcontext", "waiter", "server_side", "call_connection_made",
                "ssl_handshake_timeout"}
    return isinstance(getattr(sslproto.SSLProtocol, "max_size", None), int) and expected <= set(params)


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
