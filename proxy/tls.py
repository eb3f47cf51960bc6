"""TLS of the proxy: the server context of its TLS ports (reloaded when its files change), the client context
towards brokers, and a TLS upgrade of accepted sockets that keeps idle connections small.

Certificates. :class:`ServerTls` builds the ``ssl.SSLContext`` from ``tls_cert_file`` / ``tls_key_file`` /
``tls_trust_certs_file`` and rebuilds it when any of those files' modification time changes (checked at most
once a second, when a connection arrives), so renewed certificates are served without a restart; a rebuild
that fails (a half-written file) keeps the previous context and logs why. Client certificates are asked for
when a trust file is given (verified against it) and required with ``tls_require_trusted_client_cert``.

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
import os
import ssl
import time
from asyncio import sslproto
from typing import Optional

from .config import ProxyConfig

__all__ = ["ServerTls", "broker_client_context", "failure_reason", "start_tls_server"]

log = logging.getLogger("proxy.tls")

_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_RELOAD_CHECK_INTERVAL_S = 1.0
_RECEIVE_BUFFER_BYTES = 16 * 1024


def _server_context(config: ProxyConfig) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS[config.tls_min_protocol]
    if config.tls_ciphers:
        ctx.set_ciphers(config.tls_ciphers)
    ctx.load_cert_chain(config.tls_cert_file, config.tls_key_file)
    if config.tls_trust_certs_file:
        ctx.load_verify_locations(cafile=config.tls_trust_certs_file)
        ctx.verify_mode = ssl.CERT_REQUIRED if config.tls_require_trusted_client_cert else ssl.CERT_OPTIONAL
    return ctx


class ServerTls:
    """The TLS ports' context, rebuilt when its files change (see the module docstring).

    Raises:
        ssl.SSLError, OSError: at construction, when the files cannot be loaded.
    """

    def __init__(self, config: ProxyConfig) -> None:
        self._config = config
        self._files = [f for f in (config.tls_cert_file, config.tls_key_file, config.tls_trust_certs_file) if f]
        self._stamp = self._mtimes()
        self._context = _server_context(config)
        self._checked = time.monotonic()
        self.reloads = 0

    def _mtimes(self) -> tuple[float, ...]:
        stamps = []
        for path in self._files:
            try:
                stamps.append(os.stat(path).st_mtime)
            except OSError:
                stamps.append(-1.0)
        return tuple(stamps)

    def context(self) -> ssl.SSLContext:
        """The current context (rebuilt first if a file changed since the last check)."""
        now = time.monotonic()
        if now - self._checked >= _RELOAD_CHECK_INTERVAL_S:
            self._checked = now
            stamp = self._mtimes()
            if stamp != self._stamp:
                try:
                    self._context = _server_context(self._config)
                except (ssl.SSLError, OSError, ValueError) as e:
                    log.warning("TLS files changed but cannot be loaded (still serving the previous ones): %s", e)
                else:
                    self._stamp = stamp
                    self.reloads += 1
                    log.info("TLS certificate reloaded from %s", self._config.tls_cert_file)
        return self._context


def broker_client_context(config: ProxyConfig, *, cert_file: str = "", key_file: str = "") -> ssl.SSLContext:
    """The context the proxy connects to brokers' TLS ports with: verified against
    ``broker_client_trust_certs_file`` (or the system's CAs), host names checked during the handshake when
    ``tls_hostname_verification_enabled``, and the proxy's own certificate when it authenticates by TLS."""
    ctx = ssl.create_default_context(cafile=config.broker_client_trust_certs_file or None)
    ctx.minimum_version = _VERSIONS[config.tls_min_protocol]
    ctx.check_hostname = config.tls_hostname_verification_enabled
    ctx.verify_mode = ssl.CERT_REQUIRED
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    return ctx


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
    ``untrusted_cert``, ``handshake_timeout`` or ``tls_handshake`` (not TLS at all, no common protocol...)."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "handshake_timeout"
    text = f"{getattr(exc, 'reason', '')} {exc}".upper()
    if "PEER_DID_NOT_RETURN_A_CERTIFICATE" in text or "CERTIFICATE_REQUIRED" in text:
        return "no_client_cert"
    if any(word in text for word in ("CERTIFICATE_VERIFY_FAILED", "UNKNOWN_CA", "BAD_CERTIFICATE",
                                     "CERTIFICATE_UNKNOWN", "UNSUPPORTED_CERTIFICATE", "CERTIFICATE_EXPIRED")):
        return "untrusted_cert"
    return "tls_handshake"


def peer_certificate(transport: Optional[asyncio.BaseTransport]) -> Optional[dict]:
    """The verified client certificate of a TLS transport (``getpeercert()``), or None."""
    if transport is None:
        return None
    cert = transport.get_extra_info("peercert")
    return cert or None
