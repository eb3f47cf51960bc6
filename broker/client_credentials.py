"""The credentials a broker presents to other brokers: its admin calls (fan-out to partition owners, unloads by
the load balancer) and its replicators' producers in remote regions (Pulsar's ``brokerClientAuthenticationPlugin``
/ ``brokerClientAuthenticationParameters`` / ``brokerClientTrustCertsFilePath`` / ``brokerClientTlsEnabled``).

Settings (``broker.toml``): ``broker_client_auth_method``, ``broker_client_auth_params`` and
``broker_client_trust_certs_file``, shared with the proxy (``magnetar.auth.settings``: its ``BrokerClientSettings``
checks them and reads the token), and ``broker_client_tls_enabled``: reach other brokers and regions at their TLS
URLs (``pulsar+ssl://``, ``https://``) when they registered one. A client certificate only travels in a TLS
handshake, so ``"tls"`` implies it.

Host names are verified during the TLS handshake, before any credential is sent.
"""

from __future__ import annotations

import ssl
from typing import Any, Callable, Optional

from magnetar.auth.settings import BrokerClientSettings
from magnetar.auth.tls import TlsSettings, client_context

__all__ = ["BrokerClientSettings", "BrokerClientCredentials"]


class BrokerClientCredentials:
    """What a broker presents to other brokers (see the module docstring).

    Raises:
        ConfigError: at construction, for settings that cannot work (missing files, a token file that cannot be
            read).
    """

    def __init__(self, settings: BrokerClientSettings) -> None:
        settings.validate()
        self.settings = settings
        self.method = settings.auth_method
        self.tls = settings.tls_enabled or settings.auth_method == "tls"
        cert_file, key_file = settings.tls_files()
        self._ssl_context: Optional[ssl.SSLContext] = None
        if self.tls:
            self._ssl_context = client_context(TlsSettings(cert_file=cert_file, key_file=key_file,
                                                           trust_certs_file=settings.trust_certs_file))
        if settings.auth_method == "token":
            self.token()  # fail at start-up, not at the first remote call

    @property
    def ssl_context(self) -> Optional[ssl.SSLContext]:
        """The context towards TLS URLs (None unless TLS is used)."""
        return self._ssl_context

    def token(self) -> Optional[str]:
        """The token to send now (a ``file://`` one is read again), or None for other methods.

        Raises:
            ConfigError: the token file cannot be read, or is empty.
        """
        return self.settings.token()

    def authorization_header(self) -> Optional[str]:
        token = self.token()
        return f"Bearer {token}" if token else None

    def protocol_auth(self) -> Any:
        """``magnetar.protocol.client.Auth`` for the binary protocol (None: no credentials)."""
        from magnetar.protocol.client import Auth

        if self.method == "token":
            return Auth.token(self._token_supplier())
        if self.method == "tls":
            return Auth.tls()
        return None

    def _token_supplier(self) -> Callable[[], str]:
        def supply() -> str:
            return self.token() or ""
        return supply

    def choose_url(self, url: str, url_tls: str) -> str:
        """A peer's URL to use: its TLS one when TLS is on and it registered one, else the plain one (or the TLS one
        when that is all there is)."""
        if self.tls and url_tls:
            return url_tls
        return url or url_tls

    def http_session(self, *, timeout_s: float = 30.0) -> Any:
        """An ``aiohttp.ClientSession`` presenting these credentials on every request, redirects included
        (aiohttp drops an ``Authorization`` header on a redirect to another origin; a client middleware puts it
        back, since every broker of the region is a peer)."""
        import aiohttp

        middlewares = []
        if self.method == "token":
            async def bearer(request: Any, handler: Any) -> Any:
                header = self.authorization_header()
                if header:
                    request.headers["Authorization"] = header
                return await handler(request)
            middlewares.append(bearer)
        connector = aiohttp.TCPConnector(ssl=self._ssl_context) if self._ssl_context is not None else None
        return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s), connector=connector,
                                     middlewares=tuple(middlewares))


NO_CREDENTIALS = BrokerClientSettings()
