"""Who the proxy is towards brokers: its credentials (``broker_client_auth_*``) and TLS context.

The proxy authenticates to brokers as itself, by token or by its own client certificate, and names the client
it acts for as CONNECT's ``original_principal`` (Pulsar's ``brokerClientAuthenticationPlugin`` /
``brokerClientAuthenticationParameters``). A token given as ``file:///path`` is read again at every connection,
so a token rotated on disk is picked up without a restart.
"""

from __future__ import annotations

import pathlib
import ssl
import urllib.parse
from dataclasses import dataclass
from typing import Optional

from magnetar.errors import ConfigError
from magnetar.protocol.client import Auth

from .config import ProxyConfig
from .errors import BrokerCredentialsError
from .tls import broker_client_context

__all__ = ["BrokerClient"]


def _token_reader(params: str) -> Auth:
    if params.startswith("token:"):
        token = params[len("token:"):].strip()
        if not token:
            raise BrokerCredentialsError("broker_client_auth_params \"token:\" names no token")
        return Auth.token(token)
    if params.startswith("file://"):
        path = pathlib.Path(urllib.parse.unquote(urllib.parse.urlsplit(params).path))
        _read_token_file(path)  # fail at start-up, not at the first connection
        return Auth.token(lambda: _read_token_file(path))
    raise BrokerCredentialsError("broker_client_auth_params of method token must be \"token:<jwt>\" or "
                                 "\"file:///path\"")


def _read_token_file(path: pathlib.Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as e:
        raise BrokerCredentialsError(f"cannot read the proxy's broker token {path}: {e.strerror or e}") from None
    if not token:
        raise BrokerCredentialsError(f"the proxy's broker token file {path} is empty")
    return token


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
        method, params = config.broker_client_auth_method, config.broker_client_auth_params
        auth: Optional[Auth] = None
        cert_file = key_file = ""
        if method == "token":
            auth = _token_reader(params)
        elif method == "tls":
            cert_file, key_file = (p.strip() for p in params.split(",", 1))
            auth = Auth.tls()
        needs_tls = config.tls_enabled_with_broker or method == "tls"
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
