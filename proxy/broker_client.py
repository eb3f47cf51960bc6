"""Who the proxy is towards brokers: its credentials (``broker_client_auth_*``) and TLS context.

The proxy authenticates to brokers as itself, by token or by its own client certificate, and names the client
it acts for as CONNECT's ``original_principal`` (Pulsar's ``brokerClientAuthenticationPlugin`` /
``brokerClientAuthenticationParameters``). A token given as ``file:///path`` is read again at every connection,
so a token rotated on disk is picked up without a restart.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Callable, Optional

from magnetar.auth.settings import BrokerClientSettings
from magnetar.errors import ConfigError
from magnetar.protocol.client import Auth

from .config import ProxyConfig
from .errors import BrokerCredentialsError
from .tls import broker_client_context

__all__ = ["BrokerClient"]


def _token_supplier(settings: BrokerClientSettings) -> Callable[[], str]:
    """The proxy's token, read again at every connection (a ``file://`` one may be rotated on disk)."""
    def supply() -> str:
        try:
            return settings.token() or ""
        except ConfigError as e:
            raise BrokerCredentialsError(f"the proxy's broker token: {e}") from None
    supply()  # fail at start-up, not at the first connection
    return supply


@dataclass(frozen=True)
class BrokerClient:
    """The proxy's identity towards brokers.

    Attributes:
        auth: CONNECT credentials (None: none, ``auth_method_name`` "none").
        ssl_context: for brokers' TLS endpoints (None when the proxy reaches brokers in plain text only).
    """

    auth: Optional[Auth] = None
    ssl_context: Optional[ssl.SSLContext] = None

    @classmethod
    def from_config(cls, config: ProxyConfig) -> "BrokerClient":
        """Raises BrokerCredentialsError when the credentials or certificates cannot be loaded."""
        settings = config.broker_client_settings()
        auth: Optional[Auth] = None
        if settings.auth_method == "token":
            auth = Auth.token(_token_supplier(settings))
        elif settings.auth_method == "tls":
            auth = Auth.tls()
        cert_file, key_file = settings.tls_files()
        needs_tls = settings.tls_enabled or settings.auth_method == "tls"
        try:
            context = broker_client_context(config, cert_file=cert_file, key_file=key_file) if needs_tls else None
        except ConfigError as e:
            raise BrokerCredentialsError(f"cannot load the proxy's TLS settings towards brokers: {e}") from None
        return cls(auth=auth, ssl_context=context)

    def credentials(self) -> tuple[str, bytes]:
        """``(auth_method_name, auth_data)`` for a CONNECT now (a token file is read again)."""
        if self.auth is None:
            return "none", b""
        return self.auth.method_name, self.auth.get_data()

    def http_headers(self) -> dict[str, str]:
        """The headers that authenticate the proxy in an HTTP request to a broker (a token as Bearer; with
        ``tls`` its certificate travels in the TLS handshake instead)."""
        if self.auth is not None and self.auth.method_name == "token":
            return {"Authorization": f"Bearer {self.auth.get_data().decode()}"}
        return {}
