"""The security settings every server reads from its TOML: TLS material, authentication, authorization and the
server's own credentials towards brokers. One set of keys, documented and checked once, shared by ``broker.toml``
and ``proxy.toml`` (Pulsar's names in snake_case; docs/security.md).

A server's settings dataclass inherits :class:`SecuritySettings` (fields keyword-only, so the server's own
required fields may follow) and calls :meth:`SecuritySettings.validate_security` from its own validation. The
TLS ports are each server's own settings (their defaults differ: a proxy serves ``pulsar+ssl://`` by default, a
broker does not); the checks here read them as ``tls_port`` and ``web_tls_port`` where the server has them.
What a server builds from the settings (its TLS context, its authentication providers, its credentials towards
brokers) is built by the methods here, so every server builds it alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from magnetar.auth.tls import PROTOCOLS, TlsSettings
from magnetar.config import derive
from magnetar.errors import ConfigError

if TYPE_CHECKING:
    from magnetar.auth.providers import AuthenticationService, TokenSettings

__all__ = ["PROVIDER_NAMES", "BROKER_CLIENT_METHODS", "BrokerClientSettings", "SecuritySettings"]

PROVIDER_NAMES = ("tls", "token")  # what ``authentication_providers`` may name
BROKER_CLIENT_METHODS = ("", "token", "tls")  # what ``broker_client_auth_method`` may name ("": none)


@dataclass(frozen=True, kw_only=True)
class SecuritySettings:
    """The security settings of a server (a mixin of its settings dataclass; see the module docstring).

    Attributes:
        tls_cert_file, tls_key_file: the server's certificate (chain) and private key, PEM, for its TLS ports.
        tls_trust_certs_file: the CA certificates (PEM) client certificates must chain to; with it, TLS clients
            are asked for a certificate.
        tls_require_trusted_client_cert: refuse TLS clients without a certificate from ``tls_trust_certs_file``
            (Pulsar ``tlsRequireTrustedClientCertOnConnect``).
        tls_min_protocol: ``"TLSv1.2"`` or ``"TLSv1.3"``.
        tls_ciphers: an OpenSSL cipher string for TLS 1.2 ("": OpenSSL's default).
        authentication_enabled: clients must authenticate (Pulsar ``authenticationEnabled``): CONNECT's
            credentials, an ``Authorization: Bearer`` header or the client certificate of the TLS handshake give
            the client's role; refused clients get AuthenticationError.
        authentication_providers: ``"tls"`` (role = CN of the verified client certificate) and/or ``"token"``
            (a JWT in CONNECT's auth data or ``Authorization: Bearer``).
        authorization_enabled: check what a role asks for against the grants in the configuration store (Pulsar
            ``authorizationEnabled``). Needs authentication.
        superuser_roles: roles allowed everything (Pulsar ``superUserRoles``).
        token_secret_key, token_public_key: the key tokens are verified with (HS256 secret, or RS256/ES256
            public key), as ``data:;base64,<b64>`` or ``file:///path`` (Pulsar ``tokenSecretKey``,
            ``tokenPublicKey``; read at start-up, see ``magnetar.auth.providers.TokenSettings``).
        token_auth_claim: the claim naming the role ("sub"; Pulsar ``tokenAuthClaim``).
        token_audience_claim, token_audience: when ``token_audience`` is set, the token's audience claim must
            contain it (Pulsar ``tokenAudienceClaim``, ``tokenAudience``).
        authentication_refresh_check_ms: how often connections' credentials are checked: one that expires before
            the next check is challenged (AUTH_CHALLENGE) for fresh ones, one that expired without a refresh is
            closed (Pulsar ``authenticationRefreshCheckSeconds``, 60 s).
        broker_client_auth_method: how the server authenticates to brokers (its admin calls, replicators, a
            proxy's forwarded connections): ``"token"``, ``"tls"`` or "" (none) (Pulsar
            ``brokerClientAuthenticationPlugin``).
        broker_client_auth_params: token: ``"token:<jwt>"`` or ``"file:///path"`` (read again at every use, so a
            token rotated on disk is picked up); tls: ``"cert_file,key_file"`` (Pulsar
            ``brokerClientAuthenticationParameters``).
        broker_client_trust_certs_file: the CA certificates (PEM) brokers' certificates must chain to ("": the
            system's; Pulsar ``brokerClientTrustCertsFilePath``).
    """

    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_trust_certs_file: str = ""
    tls_require_trusted_client_cert: bool = False
    tls_min_protocol: str = "TLSv1.2"
    tls_ciphers: str = ""
    authentication_enabled: bool = False
    authentication_providers: tuple[str, ...] = ()
    authorization_enabled: bool = False
    superuser_roles: tuple[str, ...] = ()
    token_secret_key: str = ""
    token_public_key: str = ""
    token_auth_claim: str = "sub"
    token_audience_claim: str = "aud"
    token_audience: str = ""
    authentication_refresh_check_ms: int = 60_000
    broker_client_auth_method: str = ""
    broker_client_auth_params: str = ""
    broker_client_trust_certs_file: str = ""

    @property
    def serves_tls(self) -> bool:
        """Whether the server has a TLS port (``tls_port`` or ``web_tls_port``, where it has those settings)."""
        return bool(getattr(self, "tls_port", 0) or getattr(self, "web_tls_port", 0))

    # -- checks ------------------------------------------------------------------------------------------------

    def validate_security(self) -> None:
        """Raises ConfigError naming the first inconsistent security setting (keys and certificates themselves
        are read at start-up)."""
        if self.serves_tls and not (self.tls_cert_file and self.tls_key_file):
            raise ConfigError("tls_port / web_tls_port need tls_cert_file and tls_key_file (PEM)")
        if self.tls_require_trusted_client_cert and not self.tls_trust_certs_file:
            raise ConfigError("tls_require_trusted_client_cert needs tls_trust_certs_file (the CA client "
                              "certificates chain to)")
        if self.tls_min_protocol not in PROTOCOLS:
            raise ConfigError(f"tls_min_protocol must be one of {', '.join(PROTOCOLS)}, not {self.tls_min_protocol!r}")
        self.validate_authentication()
        if self.authentication_enabled and "tls" in self.authentication_providers and \
                not (self.serves_tls and self.tls_trust_certs_file):
            raise ConfigError("the tls authentication provider needs tls_port or web_tls_port and "
                              "tls_trust_certs_file: client certificates arrive only in TLS handshakes")
        if self.authentication_refresh_check_ms <= 0:
            raise ConfigError(f"authentication_refresh_check_ms must be positive, not "
                              f"{self.authentication_refresh_check_ms}")
        self.broker_client_settings().validate()

    def validate_authentication(self) -> None:
        """The authentication and authorization part of :meth:`validate_security` (what a server's authentication
        needs, with or without its TLS ports)."""
        for name in self.authentication_providers:
            if name not in PROVIDER_NAMES:
                raise ConfigError(f"authentication_providers: unknown provider {name!r}; known: "
                                  f"{', '.join(PROVIDER_NAMES)}")
        if self.authentication_enabled and not self.authentication_providers:
            raise ConfigError("authentication_enabled needs authentication_providers (\"tls\", \"token\" or both)")
        if self.authorization_enabled and not self.authentication_enabled:
            raise ConfigError("authorization_enabled needs authentication_enabled: without a role, nothing "
                              "could be allowed")
        if self.authentication_enabled and "token" in self.authentication_providers and \
                not (self.token_secret_key or self.token_public_key):
            raise ConfigError("the token provider needs token_secret_key or token_public_key")
        self._validate_roles("superuser_roles")

    def _validate_roles(self, name: str) -> None:
        if any(not role or role != role.strip() for role in getattr(self, name)):
            raise ConfigError(f"{name} must not hold empty roles or roles with surrounding spaces")

    # -- what a server builds from them ------------------------------------------------------------------------

    def tls_settings(self) -> TlsSettings:
        """The server side of the TLS ports (certificate, client certificates, policy)."""
        return TlsSettings(cert_file=self.tls_cert_file, key_file=self.tls_key_file,
                           trust_certs_file=self.tls_trust_certs_file,
                           require_client_cert=self.tls_require_trusted_client_cert,
                           min_protocol=self.tls_min_protocol, ciphers=self.tls_ciphers)

    def token_settings(self) -> "TokenSettings":
        from magnetar.auth.providers import TokenSettings

        return TokenSettings(secret_key=self.token_secret_key, public_key=self.token_public_key,
                             role_claim=self.token_auth_claim, audience_claim=self.token_audience_claim,
                             audience=self.token_audience)

    def authentication_service(self) -> "Optional[AuthenticationService]":
        """The providers of ``authentication_providers``; None when authentication is off.

        Raises:
            ConfigError: a token key that cannot be read or used.
        """
        if not self.authentication_enabled:
            return None
        from magnetar.auth.providers import AuthenticationService

        return AuthenticationService.from_settings(self.authentication_providers, token=self.token_settings())

    def broker_client_settings(self) -> "BrokerClientSettings":
        """``broker_client_*`` (and ``broker_client_tls_enabled`` where the server has it)."""
        return derive(BrokerClientSettings, self, prefix="broker_client_")


@dataclass(frozen=True)
class BrokerClientSettings:
    """What a server presents to brokers: ``broker_client_*`` without the prefix (see :class:`SecuritySettings`).

    Attributes:
        tls_enabled: reach brokers at their TLS URLs (a broker's ``broker_client_tls_enabled``; a proxy says
            ``tls_enabled_with_broker``). A client certificate travels only in a TLS handshake, so method
            ``"tls"`` needs TLS either way.
    """

    auth_method: str = ""
    auth_params: str = ""
    trust_certs_file: str = ""
    tls_enabled: bool = False

    def validate(self) -> None:
        if self.auth_method not in BROKER_CLIENT_METHODS:
            raise ConfigError(f"broker_client_auth_method must be \"token\", \"tls\" or \"\" (none), "
                              f"not {self.auth_method!r}")
        if self.auth_method and not self.auth_params:
            raise ConfigError(f"broker_client_auth_method {self.auth_method!r} needs broker_client_auth_params")
        if self.auth_method == "token" and not self.auth_params.startswith(("token:", "file:")):
            raise ConfigError("broker_client_auth_params of method token must be \"token:<jwt>\" or "
                              "\"file:///path\"")
        if self.auth_method == "tls" and len(self._parts()) != 2:
            raise ConfigError("broker_client_auth_params of method tls must be \"cert_file,key_file\"")

    def _parts(self) -> list[str]:
        return [p.strip() for p in self.auth_params.split(",") if p.strip()]

    def tls_files(self) -> tuple[str, str]:
        """``(cert_file, key_file)`` of method ``"tls"``; ``("", "")`` for the others."""
        if self.auth_method != "tls":
            return "", ""
        cert_file, key_file = self._parts()
        return cert_file, key_file

    def token(self) -> Optional[str]:
        """The token to present now (a ``file://`` one is read again, so a rotated token is picked up), or None
        for the other methods.

        Raises:
            ConfigError: the token file cannot be read, or the token is empty.
        """
        if self.auth_method != "token":
            return None
        params = self.auth_params
        if params.startswith("token:"):
            token = params[len("token:"):]
        else:
            path = params[len("file://"):] if params.startswith("file://") else params[len("file:"):]
            try:
                with open(os.path.expanduser(path), encoding="utf-8") as f:
                    token = f.read()
            except OSError as err:
                raise ConfigError(f"broker_client_auth_params: cannot read the token file {path}: "
                                  f"{err.strerror or err}") from None
        token = token.strip()
        if not token:
            raise ConfigError("broker_client_auth_params names an empty token")
        return token
