"""TLS contexts for servers (proxy, broker TLS ports) and for clients (a proxy or replicator towards brokers).

Settings are Pulsar's (snake_case): ``tls_cert_file``, ``tls_key_file``, ``tls_trust_certs_file``,
``tls_require_trusted_client_cert``, ``tls_min_protocol``, ``tls_ciphers``.

A server with a trusted CA always *asks* for a client certificate (so mTLS clients authenticate with ``tls``
while token clients connect without one); a presented certificate the CA did not sign fails the handshake;
``require_client_cert`` makes a missing certificate fail it too. Clients verify the server's chain and, unless
told otherwise, its host name (against the SANs) during the handshake, before any credential is sent.

Certificates are rotated without a restart by ``ReloadingServerContext``: it watches the files (mtime, size,
inode) and builds a new context when one changed; new connections get it, established ones keep theirs.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
from dataclasses import dataclass
from typing import Callable, Optional

from magnetar.auth.errors import AuthenticationError
from magnetar.errors import ConfigError

log = logging.getLogger(__name__)

PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


@dataclass(frozen=True)
class TlsSettings:
    """One side's TLS material and policy.

    Attributes:
        cert_file: PEM certificate (chain) presented to the peer; a client may leave it empty.
        key_file: PEM private key of ``cert_file``.
        trust_certs_file: PEM CA certificates trusted to sign the peer's certificate; a client with none uses
            the system's store; a server with none does not ask for client certificates.
        require_client_cert: servers only: refuse clients without a trusted certificate (CERT_REQUIRED).
        min_protocol: "TLSv1.2" or "TLSv1.3".
        ciphers: OpenSSL cipher string for TLS 1.2 ("" keeps OpenSSL's defaults; TLS 1.3 suites are fixed).
    """

    cert_file: str = ""
    key_file: str = ""
    trust_certs_file: str = ""
    require_client_cert: bool = False
    min_protocol: str = "TLSv1.2"
    ciphers: str = ""


def _apply_policy(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    version = PROTOCOLS.get(settings.min_protocol)
    if version is None:
        raise ConfigError(f"tls_min_protocol must be one of {', '.join(PROTOCOLS)}, not {settings.min_protocol!r}")
    ctx.minimum_version = version
    ctx.options |= ssl.OP_NO_COMPRESSION
    if settings.ciphers:
        try:
            ctx.set_ciphers(settings.ciphers)
        except ssl.SSLError:
            raise ConfigError(f"tls_ciphers {settings.ciphers!r} selects no cipher OpenSSL knows") from None


def _readable(path: str, what: str) -> None:
    if not os.path.isfile(path):
        raise ConfigError(f"{what} {path} does not exist")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{what} {path} is not readable by this process")


def _load_chain(ctx: ssl.SSLContext, settings: TlsSettings) -> None:
    _readable(settings.cert_file, "tls_cert_file")
    _readable(settings.key_file, "tls_key_file")
    try:
        ctx.load_cert_chain(settings.cert_file, settings.key_file)
    except ssl.SSLError as err:
        raise ConfigError(f"cannot use certificate {settings.cert_file} with key {settings.key_file}: "
                          f"{err.reason or err}") from None


def _load_trust(ctx: ssl.SSLContext, path: str) -> None:
    _readable(path, "tls_trust_certs_file")
    try:
        ctx.load_verify_locations(cafile=path)
    except ssl.SSLError as err:
        raise ConfigError(f"tls_trust_certs_file {path} holds no usable CA certificate: {err.reason or err}") \
            from None


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server context: its certificate and key, client certificates verified against ``trust_certs_file``
    (asked for when a CA is given, required with ``require_client_cert``).

    Raises:
        ConfigError: missing or unusable files, ``require_client_cert`` without a trusted CA, bad policy.
    """
    if not settings.cert_file or not settings.key_file:
        raise ConfigError("a TLS server needs tls_cert_file and tls_key_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _apply_policy(ctx, settings)
    _load_chain(ctx, settings)
    if settings.trust_certs_file:
        _load_trust(ctx, settings.trust_certs_file)
        ctx.verify_mode = ssl.CERT_REQUIRED if settings.require_client_cert else ssl.CERT_OPTIONAL
    elif settings.require_client_cert:
        raise ConfigError("tls_require_trusted_client_cert needs tls_trust_certs_file (the CA that signs client "
                          "certificates)")
    return ctx


def client_context(settings: TlsSettings, *, verify_hostname: bool = True) -> ssl.SSLContext:
    """A client context: the server's chain verified against ``trust_certs_file`` (or the system's CAs), its
    host name checked against its SANs unless ``verify_hostname`` is False, and a client certificate presented
    when ``cert_file`` is given.

    Raises:
        ConfigError: missing or unusable files, bad policy.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _apply_policy(ctx, settings)
    ctx.check_hostname = verify_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED  # never skipped: without the chain check, hostnames prove nothing
    if settings.trust_certs_file:
        _load_trust(ctx, settings.trust_certs_file)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if settings.cert_file or settings.key_file:
        if not (settings.cert_file and settings.key_file):
            raise ConfigError("a client certificate needs both its certificate file and its key file")
        _load_chain(ctx, settings)
    return ctx


def _signature(path: str) -> Optional[tuple[int, int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


class ReloadingServerContext:
    """A server context rebuilt when its certificate, key or trusted CA file changes.

    Two ways to use it:

    * ``context()`` per new connection (for ``loop.start_tls`` or ``wrap_socket``): the current context,
      rebuilt first if a file changed since the last build;
    * ``serving_context()`` once, for ``asyncio.start_server(ssl=...)``: a context whose handshake callback
      (OpenSSL's server-name callback, called for every ClientHello, with or without SNI) switches each new
      connection to ``context()``, so the listening socket never needs re-creating.

    A rebuild that fails (a file half-replaced by a non-atomic copy, a key that does not match yet) keeps the
    previous context and is retried at the next check; the first build must succeed (``ConfigError``).

    Args:
        settings: the files and policy; the policy (protocols, ciphers, client certificates) is fixed, the
            files' contents may change.
        check_interval_s: at most one look at the files per interval (stat calls are cheap, but a busy server
            accepts thousands of connections a second); 0 looks every time.
        clock: monotonic seconds (swappable in tests).
    """

    def __init__(self, settings: TlsSettings, *, check_interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._check_interval_s = check_interval_s
        self._clock = clock
        self._paths = tuple(p for p in (settings.cert_file, settings.key_file, settings.trust_certs_file) if p)
        self._signatures = self._current_signatures()
        self._context = server_context(settings)
        self._checked_at = clock()
        self._serving: Optional[ssl.SSLContext] = None
        self.reloads = 0
        self.failed_reloads = 0

    def _current_signatures(self) -> tuple:
        return tuple(_signature(p) for p in self._paths)

    def context(self) -> ssl.SSLContext:
        """The context for a new connection."""
        now = self._clock()
        if now - self._checked_at >= self._check_interval_s:
            self._checked_at = now
            signatures = self._current_signatures()
            if signatures != self._signatures:
                self._reload(signatures)
        return self._context

    def _reload(self, signatures: tuple) -> None:
        try:
            context = server_context(self.settings)
        except ConfigError as err:
            self.failed_reloads += 1
            log.warning("TLS files changed but cannot be loaded (keeping the previous certificate): %s", err)
            return
        self._context = context
        self._signatures = signatures
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", self.settings.cert_file)

    def serving_context(self) -> ssl.SSLContext:
        """A context for a listening socket that hands each new connection the current ``context()``."""
        if self._serving is None:
            serving = server_context(self.settings)

            def switch(ssl_object: ssl.SSLObject, _server_name: Optional[str], _ctx: ssl.SSLContext) -> None:
                current = self.context()
                if current is not _ctx:
                    ssl_object.context = current

            serving.sni_callback = switch
            self._serving = serving
        return self._serving


def handshake_failure(err: BaseException) -> AuthenticationError:
    """An ``AuthenticationError`` for a server-side TLS handshake that failed, labelled for metrics:
    ``no_client_cert`` when a required certificate was missing, ``untrusted_cert`` when a presented one did not
    verify, ``malformed`` otherwise (plain text on a TLS port, a protocol the server refuses, ...)."""
    text = f"{getattr(err, 'reason', '') or ''} {getattr(err, 'verify_message', '') or ''} {err}".lower()
    if "peer did not return a certificate" in text or "certificate required" in text:
        return AuthenticationError("TLS handshake refused: this server requires a client certificate",
                                   reason="no_client_cert")
    if "certificate verify failed" in text or "unknown ca" in text or "bad certificate" in text or \
            "unsupported certificate" in text or "certificate expired" in text:
        return AuthenticationError("TLS handshake refused: client certificate not trusted (not signed by the "
                                   "trusted CA, expired, or not for client use)", reason="untrusted_cert")
    return AuthenticationError(f"TLS handshake failed: {getattr(err, 'reason', None) or err}", reason="malformed")
